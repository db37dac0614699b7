"""Loading drivers from entry points and [agent] enabled_drivers."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.drivers import available_drivers, load_drivers
from acceleron.drivers.__main__ import main
from acceleron.drivers.base import Driver, Programmable
from acceleron.drivers.errors import DriverConfigError
from tests.fixtures.sysfs import SCENARIO_6_1


def test_every_driver_is_registered() -> None:
    assert sorted(available_drivers()) == [
        "fake",
        "intel_fpga",
        "intel_qat",
        "nvidia_gpu",
        "pci",
        "xilinx_fpga",
    ]


def test_default_is_the_fake_driver(tmp_path: Path) -> None:
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(tmp_path)}})
    assert conf.agent.enabled_drivers == ["fake"]
    (driver,) = load_drivers(conf, tmp_path)
    assert driver.name == "fake"


def test_load_all_in_order(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    names = ["intel_fpga", "xilinx_fpga", "nvidia_gpu", "intel_qat", "pci", "fake", "pci"]
    driver_conf.set_override("enabled_drivers", names, group="agent")
    drivers = load_drivers(driver_conf, tmp_path)
    assert [d.name for d in drivers] == names[:-1]
    assert all(isinstance(d, Driver) for d in drivers)
    assert [d.name for d in drivers if isinstance(d, Programmable)] == [
        "intel_fpga",
        "xilinx_fpga",
        "fake",
    ]
    # An empty root (no sys/ at all) is an empty host for every driver.
    assert [d.discover() for d in drivers if d.name != "fake"] == [[], [], [], [], []]


def test_unknown_driver_is_a_clear_error(driver_conf: cfg.ConfigOpts, tmp_path: Path) -> None:
    driver_conf.set_override("enabled_drivers", ["fake", "intel_fgpa"], group="agent")
    with pytest.raises(DriverConfigError, match=r"unknown driver 'intel_fgpa'.*available: fake, "):
        load_drivers(driver_conf, tmp_path)


def test_options_are_in_the_sample() -> None:
    groups = dict(confmod.list_opts())
    for group in ("agent", "fake", "pci", "intel_fpga", "xilinx_fpga", "nvidia_gpu"):
        assert groups[group], group


def test_discovery_check_command(
    sysfs_tree: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m acceleron.drivers``: what an operator runs to check a host."""
    root = sysfs_tree(SCENARIO_6_1)
    conf_file = tmp_path / "acceleron.conf"
    conf_file.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    args = ["--config-file", str(conf_file), "--root", str(root), "--drivers", "intel_qat"]
    assert main([*args, "--spec004"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "intel_qat": {
            "0000:3d:00.0": {"type": "QAT", "vendor": "INTEL", "product": "C62X", "regions": []}
        }
    }
    assert main(args) == 0
    (device,) = json.loads(capsys.readouterr().out)["intel_qat"]
    assert device["health"] == {
        "state": "healthy",
        "reason": None,
        "deployables": {},
        "handles": {},
    }
    assert device["deployables"][0]["attach_handles"][3]["address"] == "0000:3d:01.3"
