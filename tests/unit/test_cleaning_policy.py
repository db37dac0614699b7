"""Which cleaning a device given back gets, and what Placement holds reserved for it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from oslo_config import cfg

from acceleron.exceptions import ConfigError
from acceleron.placement import tree
from acceleron.service.cleaning import Policy


def test_by_type_by_profile_and_by_default(conf: cfg.ConfigOpts) -> None:
    policy = Policy.from_conf(conf)
    assert policy.method("GPU", {}) == "reset" and policy.method("fpga", {}) == "scrub"
    assert policy.method("VGPU", {}) == "none" and policy.method("QAT", {}) == "reset"
    assert policy.method("FPGA", {"accel:cleaning": "none"}) == "none"
    conf.set_override("methods", {"qat": "command"}, "cleaning")
    conf.set_override("default_method", "none", "cleaning")
    policy = Policy.from_conf(conf)
    assert policy.method("QAT", {}) == "command" and policy.method("GPU", {}) == "none"


def test_a_method_that_is_none_of_them_stops_the_start(conf: cfg.ConfigOpts) -> None:
    conf.set_override("methods", {"GPU": "wipe"}, "cleaning")
    with pytest.raises(ConfigError, match="GPU:wipe is not a cleaning"):
        Policy.from_conf(conf)


def test_what_is_being_cleaned_is_reserved_in_placement() -> None:
    device = SimpleNamespace(
        type="QAT",
        vendor_name="INTEL",
        model="C62X",
        driver_name="x",
        hostname="h",
        pci_address="0000:3d:00.0",
        state="present",
        health="healthy",
        status="enabled",
    )
    pool = SimpleNamespace(
        num_accelerators=4,
        accelerator_type=None,
        memory_mb=None,
        health="healthy",
        status="enabled",
        cleaning=1,
    )
    (inventory,) = tree.inventories(device, pool, tree.Options()).values()
    assert (inventory.total, inventory.reserved) == (4, 1)
    unhealthy = SimpleNamespace(**{**vars(pool), "health": "unhealthy"})
    (inventory,) = tree.inventories(device, unhealthy, tree.Options()).values()
    assert inventory.reserved == 4
