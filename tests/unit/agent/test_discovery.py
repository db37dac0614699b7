"""One scan: real drivers on fake sysfs trees, merged, deduplicated, built into a report."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from oslo_config import cfg

import acceleron
from acceleron.agent import discovery
from acceleron.agent.client import connect
from acceleron.agent.loop import Agent, Settings
from acceleron.drivers import load_drivers
from acceleron.report import from_json, to_json
from acceleron.vocabulary import Device, Health
from tests.fixtures.sysfs import SCENARIO_6_1

MakeTree = Callable[[str], Path]
FPGA = "0000:5e:00.0"
# The fake driver's QAT card on host "fakehost" (its addresses derive from the host name).
FAKE_QAT = "0000:42:00.0"
QAT_AT_FAKE_ADDRESS = f"""
devices:
  - bdf: "{FAKE_QAT}"
    vendor: "0x8086"
    device: "0x37c8"
    class: "0x0b4000"
    driver: c6xx
    sriov: {{totalvfs: 16, vf_device: "37c9", vf_driver: c6xxvf, vfs: ["0000:42:01.0"]}}
"""


def owners(devices: Sequence[Device]) -> dict[str, str]:
    return {d.pci_address: d.driver for d in devices}


def test_the_drivers_devices_merged_in_driver_order(
    sysfs_tree: MakeTree, agent_conf: cfg.ConfigOpts
) -> None:
    root = sysfs_tree(SCENARIO_6_1)
    drivers = ["intel_qat", "intel_fpga", "nvidia_gpu"]
    agent_conf.set_override("enabled_drivers", drivers, group="agent")
    scan = discovery.scan(load_drivers(agent_conf, root))
    assert scan.complete
    assert list(owners(scan.devices).items()) == [
        ("0000:3d:00.0", "intel_qat"),
        ("0000:5e:00.0", "intel_fpga"),
        ("0000:be:00.0", "intel_fpga"),
        ("0000:3b:00.0", "nvidia_gpu"),
    ]


@pytest.mark.parametrize(
    ("order", "winner"), [(["intel_fpga", "pci"], "intel_fpga"), (["pci", "intel_fpga"], "pci")]
)
def test_a_device_two_drivers_claim_is_reported_once_by_the_first(
    sysfs_tree: MakeTree,
    agent_conf: cfg.ConfigOpts,
    caplog: pytest.LogCaptureFixture,
    order: list[str],
    winner: str,
) -> None:
    agent_conf.set_override("device_spec", [json.dumps({"address": FPGA})], group="pci")
    agent_conf.set_override("enabled_drivers", order, group="agent")
    scan = discovery.scan(load_drivers(agent_conf, sysfs_tree(SCENARIO_6_1)))
    assert [d.pci_address for d in scan.devices].count(FPGA) == 1
    assert owners(scan.devices)[FPGA] == winner
    loser = order[1]
    assert f"Device {FPGA} is reported by drivers {winner} and {loser}; keeping {winner}'s" in (
        caplog.text
    )
    from_json(to_json(discovery.build_report("fakehost", scan.devices)))


def test_the_fake_driver_wins_over_a_sysfs_driver_listed_after_it(
    sysfs_tree: MakeTree, agent_conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    agent_conf.set_override("enabled_drivers", ["fake", "intel_qat"], group="agent")
    scan = discovery.scan(load_drivers(agent_conf, sysfs_tree(QAT_AT_FAKE_ADDRESS)))
    assert owners(scan.devices)[FAKE_QAT] == "fake"
    assert len(scan.devices) == 5  # the fake driver's five, the sysfs copy dropped
    assert "reported by drivers fake and intel_qat" in caplog.text


class BrokenDriver:
    """A driver whose discovery fails (say, its tool crashed)."""

    name = "broken"

    def discover(self) -> Sequence[Device]:
        raise OSError("the vendor tool crashed")

    def health(self, device: Device) -> Health:
        return Health("unhealthy")


def test_a_failing_driver_is_logged_and_the_scan_marked_incomplete(
    sysfs_tree: MakeTree, agent_conf: cfg.ConfigOpts, caplog: pytest.LogCaptureFixture
) -> None:
    agent_conf.set_override("enabled_drivers", ["intel_fpga"], group="agent")
    drivers = [*load_drivers(agent_conf, sysfs_tree(SCENARIO_6_1)), BrokenDriver()]
    scan = discovery.scan(drivers)
    assert scan.failed == ("broken",) and not scan.complete
    assert sorted(owners(scan.devices)) == ["0000:5e:00.0", "0000:be:00.0"]
    assert "Driver broken failed to discover its devices" in caplog.text
    assert "the vendor tool crashed" in caplog.text  # the traceback is logged


def test_no_report_is_sent_when_a_driver_failed(
    agent_conf: cfg.ConfigOpts, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Nothing listens on port 1: had the agent tried to send, ApiUnavailable would be raised.
    agent_conf.set_override("api_endpoint", "http://127.0.0.1:1", group="agent")
    agent_conf.set_override("enabled_drivers", ["fake"], group="agent")
    drivers = [*load_drivers(agent_conf, tmp_path), BrokenDriver()]
    agent = Agent(Settings.from_conf(agent_conf), drivers, connect(agent_conf))
    assert agent.report_once() is False
    assert "Not reporting this scan: driver(s) broken failed" in caplog.text


def test_the_report_is_valid_and_says_who_sent_it(
    sysfs_tree: MakeTree, agent_conf: cfg.ConfigOpts
) -> None:
    agent_conf.set_override(
        "enabled_drivers", ["fake", "intel_fpga", "nvidia_gpu", "intel_qat"], group="agent"
    )
    scan = discovery.scan(load_drivers(agent_conf, sysfs_tree(SCENARIO_6_1)))
    report = discovery.build_report("fakehost", scan.devices)
    assert report.hostname == "fakehost"
    assert report.agent_version == acceleron.__version__
    assert len(report.devices) == 9  # the fake driver's five and the tree's four
    assert from_json(json.loads(json.dumps(to_json(report)))) == report
