"""os_acc (spec 000) against a live API and a host whose agent does the work."""

from __future__ import annotations

import json
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import os_acc
from acceleron import conf as confmod
from os_acc import (
    AgentUnavailable,
    Connector,
    NotReady,
    PlugFailed,
    UnsupportedOperation,
    operations,
)
from os_acc.operations import Action
from tests.fixtures.host import Host, call, get, profile, upload

REGION0_TYPE = "ce48969398f05f33946d560708be108a"
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"


@pytest.fixture
def host(live_api: str, tmp_path: Path) -> Host:
    found = Host(live_api, tmp_path)
    found.report()
    return found


def connector(host: Host, timeout: float = 20) -> Connector:
    return Connector(host.runner().client.api, host.name, timeout=timeout, poll=0.05)


def instance(**extra: Any) -> dict[str, Any]:
    return {"uuid": str(uuid.uuid4()), "name": "vm", **extra}


def rp_of(host: Host, key: str, kind: str) -> str:
    deployables = get(host.url, "/v2/deployables", hostname=host.name)["deployables"]
    rp: str = next(d["rp_uuid"] for d in deployables if d["key"] == key and d["kind"] == kind)
    return rp


def test_initialize_waits_for_the_agent(live_api: str, tmp_path: Path) -> None:
    host = Host(live_api, tmp_path)  # its agent has not reported yet
    with pytest.raises(AgentUnavailable, match="has not reported"):
        connector(host).initialize(timeout=0.2)
    host.report()
    connector(host).initialize(timeout=5)


def test_initialize_without_the_api_is_agent_unavailable(tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"host": "h", "state_path": str(tmp_path)},
            "agent": {"api_endpoint": f"http://127.0.0.1:{port}"},
        },
    )
    with pytest.raises(os_acc.CyborgAgentUnavailable, match="cannot be reached"):
        Connector.from_conf(conf).initialize(timeout=0)


def test_plug_a_device_profile_with_two_groups_then_unplug(host: Host) -> None:
    function = uuid.uuid4().hex
    tenant = {"X-Roles": "member", "X-Project-Id": "tenant-a"}  # a bitstream the VM's project sees
    upload(host.url, REGION0_TYPE, function, REGION0_TYPE, headers=tenant)
    fpga = {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_PROGRAMMABLE": "required",
        "accel:function_id": function,
    }
    name = profile(host.url, [fpga, {"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    selected = {
        "device_profile_0": [rp_of(host, "region0", "region")],
        "device_profile_1": [rp_of(host, "vf_pool", "vf_pool")],
    }
    vm = instance(project_id="tenant-a")
    with host.working(), ThreadPoolExecutor(max_workers=1) as executor:  # as spec 000 shows
        future = executor.submit(connector(host).plug, vm, selected, {"accel:device_profile": name})
        plugged = future.result()
    assert [p["device_profile_group_id"] for p in plugged] == [0, 1]
    assert all(p["pci_id"] and p["attach_handle_type"] == "TEST_PCI" for p in plugged)
    arqs = get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"]
    assert {a["project_id"] for a in arqs} == {"tenant-a"}
    assert host.programmed == 1
    assert connector(host).unplug(vm) == 2
    assert connector(host).unplug(vm) == 0  # nothing left: still fine
    assert get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"] == []


def test_plug_inline_extra_specs_shares_one_profile(host: Host) -> None:
    specs = {
        "resources1:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait1:CUSTOM_PROGRAMMABLE": "required",
        f"function1:CUSTOM_FPGA_INTEL_FUNCTION_{PRELOADED.upper()}": "required",
        "hw:cpu_policy": "dedicated",
    }
    selected = {"uuid": rp_of(host, "region0", "region")}
    first, second = instance(), instance()
    plugged = connector(host).plug(first, selected, specs)
    assert len(plugged) == 1 and host.programmed == 0  # pre-programmed: nothing to load
    connector(host).plug(second, selected, specs)
    names = {
        arq["device_profile_name"]
        for vm in (first, second)
        for arq in get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"]
    }
    assert len(names) == 1 and names.pop().startswith("os-acc-")  # one profile for both
    assert connector(host).unplug(first) == 1 and connector(host).unplug(second) == 1


def test_plug_inline_groups_by_nova_suffixes(host: Host) -> None:
    """Nova maps a flavor's inline groups to providers by their suffixes ("1", "2"), not
    by 0-based index: each group is bound to the provider its suffix names."""
    specs = {"resources1:CUSTOM_ACCELERATOR_FPGA": "1", "resources2:CUSTOM_ACCELERATOR_QAT": "1"}
    region, pool = rp_of(host, "region1", "region"), rp_of(host, "vf_pool", "vf_pool")
    vm = instance()
    plugged = connector(host).plug(vm, {"1": [region], "2": [pool]}, specs)
    assert [p["device_profile_group_id"] for p in plugged] == [0, 1]
    arqs = get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"]
    bound = {a["device_profile_group_id"]: a["device_rp_uuid"] for a in arqs}
    assert bound == {0: region, 1: pool}
    assert connector(host).unplug(vm) == 2


def test_concurrent_plugs_share_the_handles_and_the_last_one_fails_cleanly(host: Host) -> None:
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    selected = {"uuid": rp_of(host, "vf_pool", "vf_pool")}
    vms = [instance() for _ in range(5)]  # the QAT card has four VFs
    shared = connector(host)

    def plug(vm: dict[str, Any]) -> list[dict[str, Any]] | str:
        try:
            return shared.plug(vm, selected, {"accel:device_profile": name})
        except PlugFailed as error:
            return str(error)

    with ThreadPoolExecutor(max_workers=5) as executor:
        results = list(executor.map(plug, vms))
    plugged = [r for r in results if isinstance(r, list)]
    failed = [r for r in results if isinstance(r, str)]
    assert len(plugged) == 4 and len({p[0]["pci_id"] for p in plugged}) == 4
    assert len(failed) == 1 and "no free attach handle" in failed[0]
    loser = vms[results.index(failed[0])]
    assert get(host.url, "/v2/accelerator_requests", instance=loser["uuid"])["arqs"] == []


def test_bad_input_is_a_clear_plug_failure(host: Host) -> None:
    plug = connector(host).plug
    with pytest.raises(PlugFailed, match="uuid"):
        plug({"name": "no uuid"}, {}, {"accel:device_profile": "x"})
    with pytest.raises(PlugFailed, match="no accelerator"):
        plug(instance(), {}, {"hw:cpu_policy": "dedicated"})
    with pytest.raises(PlugFailed, match="not found"):
        plug(instance(), {}, {"accel:device_profile": "no-such-profile"})
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    vm = instance()
    with pytest.raises(PlugFailed, match=r"no provider for group\(s\) \[0\]"):
        plug(vm, {"device_profile_7": ["x"]}, {"accel:device_profile": name})
    assert get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"] == []
    nowhere = {"uuid": str(uuid.uuid4())}
    with pytest.raises(PlugFailed, match="not the resource provider"):
        plug(vm, nowhere, {"accel:device_profile": name})
    inline = {
        "accel:device_profile": name,
        "resources1:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait1:CUSTOM_PROGRAMMABLE": "required",
    }
    with pytest.raises(PlugFailed, match=r"also asks for accelerators inline \(resources:"):
        plug(vm, {"uuid": rp_of(host, "vf_pool", "vf_pool")}, inline)
    leftovers = [
        a
        for a in get(host.url, "/v2/accelerator_requests")["arqs"]
        if a["device_profile_name"] == name
    ]
    assert leftovers == []
    assert call(host.url, "GET", "/v2/device_profiles").ok


def test_a_profile_beside_groups_of_other_resources_is_plugged(host: Host) -> None:
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    specs = {"accel:device_profile": name, "resources1:SRIOV_NET_VF": "1",
             "trait1:CUSTOM_PHYSNET_A": "required"}  # fmt: skip  # a NIC's VF: Nova's own
    vm = instance()
    plugged = connector(host).plug(vm, {"uuid": rp_of(host, "vf_pool", "vf_pool")}, specs)
    assert [p["device_profile_group_id"] for p in plugged] == [0]
    assert connector(host).unplug(vm) == 1


# --- instance operations: each rule, done by before() and after() ----------------------


@pytest.mark.parametrize("operation", list(operations.OPERATIONS))
def test_every_instance_operation_does_what_its_rule_says(host: Host, operation: str) -> None:
    rule = operations.OPERATIONS[operation]
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_QAT": "1"}])
    specs = {"accel:device_profile": name}
    selected = {"uuid": rp_of(host, "vf_pool", "vf_pool")}
    shared, vm = connector(host), instance()
    if rule.before is not Action.PLUG:  # an instance that has its accelerators
        shared.before("boot", vm, selected, specs)
    if rule.before is Action.REFUSE:
        with pytest.raises(UnsupportedOperation, match="not supported"):
            shared.before(operation, vm, selected, specs)
        return
    done = shared.before(operation, vm, selected, specs)
    held = get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"]
    assert len(held) == (0 if rule.before is Action.UNPLUG else 1)
    if rule.before is Action.UNPLUG:
        assert done == 1
    elif rule.before is Action.PLUG:
        assert [p["pci_id"] is not None for p in done] == [True]
    elif rule.before in (Action.CHECK, Action.RECORD):
        assert [a["arq_uuid"] for a in done] == [held[0]["uuid"]]
        assert done[0]["problems"] == [] and done[0]["device"]["type"] == "QAT"
    else:
        assert done is None
    done = shared.after(operation, vm, selected, specs)
    after = get(host.url, "/v2/accelerator_requests", instance=vm["uuid"])["arqs"]
    assert len(after) == (1 if rule.after is Action.PLUG else len(held))
    assert all(a["state"] == "Bound" for a in after)
    if rule.after is Action.PLUG:
        assert [p["pci_id"] is not None for p in done] == [True]
    else:
        assert rule.after is Action.NOTHING and done is None
    shared.unplug(vm)


def test_plugging_around_an_operation_needs_the_specs(host: Host) -> None:
    with pytest.raises(PlugFailed, match="needs flavor_extra_specs"):
        connector(host).after("resize", instance())


def test_set_admin_password_checks_each_accelerator(host: Host) -> None:
    """A device out of service and a region being programmed are named; then it passes."""
    tenant = {"X-Roles": "member", "X-Project-Id": "tenant-a"}
    name = profile(
        host.url,
        [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}, {"resources:CUSTOM_ACCELERATOR_QAT": "1"}],
    )
    selected = {
        "device_profile_0": [rp_of(host, "region0", "region")],
        "device_profile_1": [rp_of(host, "vf_pool", "vf_pool")],
    }
    shared, vm = connector(host), instance(project_id="tenant-a")
    shared.plug(vm, selected, {"accel:device_profile": name})
    checked = shared.before("set_admin_password", vm)
    assert [(a["deployable"]["kind"], a["problems"]) for a in checked] == [
        ("region", []),
        ("vf_pool", []),
    ]
    qat = checked[1]["device"]["uuid"]
    assert call(host.url, "POST", f"/v2/devices/{qat}/disable").ok
    with pytest.raises(NotReady, match=r"device \S+ is maintaining") as refused:
        shared.check(vm)
    assert refused.value.accelerators[0]["problems"] == []
    assert call(host.url, "POST", f"/v2/devices/{qat}/enable").ok
    bitstream = upload(host.url, REGION0_TYPE, uuid.uuid4().hex, REGION0_TYPE, headers=tenant)
    fpga_arq = checked[0]["arq_uuid"]
    started = call(
        host.url,
        "POST",
        f"/v2/accelerator_requests/{fpga_arq}/program",
        json={"bitstream_id": bitstream},
        headers=tenant,
    )
    assert started.status_code == 202, started.text
    with pytest.raises(NotReady, match=r"region0 is being programmed \(queued\)"):
        shared.check(vm)
    host.run_tasks(lambda: not host.region()["program_phase"])
    assert [a["problems"] for a in shared.check(vm)] == [[], []]
    assert shared.unplug(vm) == 2


def test_one_requests_failed_programming_is_not_anothers_problem(host: Host) -> None:
    """Tenant a's bind fails to program region0 (a bitstream built for another
    interface); tenant b then binds region0 as it is: b's instance is ready, and the
    region no longer shows a's failure (it belongs to a's request)."""
    other_interface = "11112222333344445555666677778888"
    bad = upload(
        host.url,
        other_interface,
        uuid.uuid4().hex,
        headers={"X-Roles": "member", "X-Project-Id": "tenant-a"},
    )
    region = rp_of(host, "region0", "region")
    failing = profile(
        host.url, [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:bitstream_id": bad}]
    )
    with host.working(), pytest.raises(PlugFailed, match="interface"):
        connector(host).plug(
            instance(project_id="tenant-a"),
            {"device_profile_0": [region]},
            {"accel:device_profile": failing},
        )
    assert host.region()["program_phase"] == "failed"
    plain = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}])
    vm = instance(project_id="tenant-b")
    shared = connector(host)
    shared.plug(vm, {"device_profile_0": [region]}, {"accel:device_profile": plain})
    assert [a["problems"] for a in shared.before("set_admin_password", vm)] == [[]]
    assert host.region()["program_phase"] is None and host.region()["program_error"] is None
    assert shared.unplug(vm) == 1


def test_trigger_crash_dump_records_each_accelerator(host: Host) -> None:
    """The record names the vGPU (found by its mdev) and its GPU; it is JSON."""
    vgpu = host.vgpu()
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    vm = instance()
    with host.working():
        connector(host).plug(vm, {"uuid": vgpu["rp_uuid"]}, {"accel:device_profile": name})
    recorded = connector(host).before("trigger_crash_dump", vm)
    assert len(recorded) == 1
    entry = recorded[0]
    assert entry["attach_handle_type"] == "MDEV" and entry["problems"] == []
    assert entry["deployable"]["uuid"] == vgpu["uuid"]
    assert (entry["device"]["type"], entry["device"]["health"]) == ("GPU", "ok")
    assert json.loads(json.dumps(recorded)) == recorded
    with host.working():
        assert connector(host).unplug(vm) == 1
    assert connector(host).record(vm) == []  # nothing left: nothing to record


# --- attach_target -----------------------------------------------------------------


def test_attach_target_says_where_each_accelerator_goes(host: Host) -> None:
    """VM: plug gives its pci_id; host and none: no pci_id, so nothing attaches them to
    the instance. Before 2.11 (Nova) their requests show no handle; from 2.11 all do."""
    qat = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
    name = profile(
        host.url,
        [qat, {**qat, "accel:attach_target": "host"}, {**qat, "accel:attach_target": "none"}],
    )
    vm = instance()
    plugged = connector(host).plug(
        vm, {"uuid": rp_of(host, "vf_pool", "vf_pool")}, {"accel:device_profile": name}
    )
    assert [(p["attach_target"], p["pci_id"] is not None) for p in plugged] == [
        ("VM", True),
        ("host", False),
        ("none", False),
    ]
    assert all(p["attach_handle_type"] == "TEST_PCI" for p in plugged)
    assert "bus" in plugged[1]["attach_handle_info"]  # the host's software finds it so

    def listed(version: str) -> list[dict[str, Any]]:
        header = {"OpenStack-API-Version": f"accelerator {version}"}
        params = {"instance": vm["uuid"]}
        response = call(host.url, "GET", "/v2/accelerator_requests", params=params, headers=header)
        assert response.ok, response.text
        arqs: list[dict[str, Any]] = response.json()["arqs"]
        return sorted(arqs, key=lambda a: a["device_profile_group_id"])

    nova = listed("2.0")
    assert [a["state"] for a in nova] == ["Bound"] * 3
    assert [a["attach_handle_type"] for a in nova] == ["TEST_PCI", None, None]
    assert [a["attach_handle_info"] is None for a in nova] == [False, True, True]
    assert all("attach_target" not in a for a in listed("2.9"))
    latest = listed("2.11")
    assert [a["attach_target"] for a in latest] == ["VM", "host", "none"]
    assert all(a["attach_handle_type"] == "TEST_PCI" for a in latest)
    record = connector(host).record(vm)
    assert [r["attach_target"] for r in record] == ["VM", "host", "none"]
    assert all(r["problems"] == [] for r in record)
    assert connector(host).unplug(vm) == 3
