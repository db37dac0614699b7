"""Memory families, as spec 001's memory classes name them."""

from __future__ import annotations

import pytest

from acceleron.drivers import memory, nvidia_gpu, nvml


@pytest.mark.parametrize(
    ("text", "family"),
    [
        ("NVIDIA H100 80GB HBM3", "HBM"),
        ("NVIDIA A100-SXM4-80GB HBM2e", "HBM"),
        ("GDDR6X", "GDDR"),
        ("GDDR6", "GDDR"),
        ("DDR4", "DDR"),
        ("LPDDR5", "LPDDR"),
        ("hbm2", "HBM"),
        ("NVIDIA H100 PCIe", None),
        ("", None),
        (None, None),
    ],
)
def test_family(text: str | None, family: str | None) -> None:
    assert memory.family(text) == family


def test_a_gpu_says_its_memory_through_nvml_else_the_product_table() -> None:
    def gpu(name: str, product: str) -> nvml.NvmlGpu:
        return nvml.NvmlGpu("0000:3b:00.0", product, name, "GPU-1", 1024, 0, False)

    assert nvidia_gpu.memory_type(gpu("NVIDIA Next 96GB HBM4", "ffff"), "ffff") == "HBM"
    assert nvidia_gpu.memory_type(gpu("NVIDIA H100 PCIe", "2331"), "2331") == "HBM"
    assert nvidia_gpu.memory_type(None, "1eb8") == "GDDR"  # a T4 without NVML
    assert nvidia_gpu.memory_type(gpu("NVIDIA H200", "2335"), "2335") == "HBM"  # no memory named
    assert nvidia_gpu.memory_type(None, "ffff") is None
