"""Binding with programming, end to end over HTTP: a live API, the agent's task runner
with the fake driver, the local bitstream store.

Covers the phases the agent reports, the region recorded afterwards, a bitstream the
region cannot take, an agent restarted mid-task (never programming twice), a bind
unbound before its task ran, the admin's program API, run-time reprogramming by the
request's project, and vGPUs made and removed for a bind.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.agent import tasks
from acceleron.agent.client import connect
from acceleron.agent.loop import Agent, Settings
from acceleron.drivers import gbs, load_drivers
from acceleron.drivers.fake import FakeDriver

LATEST = {"OpenStack-API-Version": "accelerator latest"}
REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"  # what region0 holds at start


class Host:
    """One compute host: its agent's configuration, drivers, client and task runner."""

    def __init__(self, url: str, tmp_path: Path) -> None:
        self.name = f"compute-{uuid.uuid4().hex[:8]}"
        self.url = url
        self.conf = confmod.load([], config_files=[], overrides={
            "DEFAULT": {"state_path": str(tmp_path), "host": self.name},
            "agent": {"api_endpoint": url, "enabled_drivers": ["fake"], "task_wait": 0.5},
        })  # fmt: skip
        self.agent = Agent(
            Settings.from_conf(self.conf), load_drivers(self.conf, Path("/")), connect(self.conf)
        )
        self.phases: list[tuple[str, str | None]] = []
        self.programmed = 0

    def runner(self) -> tasks.TaskRunner:
        runner = tasks.TaskRunner(  # a client of its own, as a restarted agent has
            tasks.Settings.from_conf(self.conf), self.agent.drivers, connect(self.conf)
        )
        update, program = runner.client.update_task, FakeDriver.program

        def recording_update(uuid: str, **fields: Any) -> Any:
            self.phases.append((fields["state"], fields.get("phase")))
            return update(uuid, **fields)

        def counting_program(driver: FakeDriver, *args: Any) -> None:
            self.programmed += 1
            program(driver, *args)

        runner.client.update_task = recording_update  # type: ignore[method-assign]
        for driver in runner.drivers:
            if isinstance(driver, FakeDriver):
                driver.program = counting_program.__get__(driver)  # type: ignore[method-assign]
        return runner

    def report(self) -> None:
        assert self.agent.report_once()

    def run_tasks(self, until: Callable[[], bool], seconds: float = 20) -> None:
        """Run a task runner until ``until()`` holds (then stop it)."""
        runner = self.runner()
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        try:
            wait_for(until, seconds)
        finally:
            runner.stop()
            thread.join(timeout=10)

    def region(self, key: str = "region0") -> dict[str, Any]:
        found = [
            d
            for d in get(self.url, "/v2/deployables", hostname=self.name)["deployables"]
            if d["key"] == key and d["kind"] == "region"
        ]
        return found[0]  # the first FPGA's

    def vgpu(self) -> dict[str, Any]:
        deployables = get(self.url, "/v2/deployables", hostname=self.name)["deployables"]
        return next(d for d in deployables if d["key"] == "vgpu/nvidia-223")


def get(url: str, path: str, **params: str) -> Any:
    response = requests.get(url + path, params=params, headers=LATEST, timeout=10)
    response.raise_for_status()
    return response.json()


def call(url: str, method: str, path: str, **kwargs: Any) -> requests.Response:
    headers = {**LATEST, **kwargs.pop("headers", {})}
    return requests.request(method, url + path, headers=headers, timeout=10, **kwargs)


def wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def upload(
    url: str,
    interface: str,
    function: str,
    declared_type: str | None = None,
    headers: dict[str, str] | None = None,
) -> str:
    """A GBS bitstream in the local store (the caller project's); its uuid."""
    meta: dict[str, Any] = {"name": f"{function[:8]}.gbs", "function_uuid": function}
    if declared_type:
        meta["region_type_uuid"] = declared_type
    created = call(url, "POST", "/v2/bitstreams", json=meta, headers=headers or {})
    assert created.status_code == 201, created.text
    data = gbs.build(interface, (function,), payload=b"\x5a" * 300_000)
    put = call(
        url,
        "PUT",
        f"/v2/bitstreams/{created.json()['uuid']}/data",
        data=data,
        headers={"Content-Type": "application/octet-stream", **(headers or {})},
    )
    assert put.status_code == 200, put.text
    bitstream_id: str = created.json()["uuid"]
    return bitstream_id


def profile(url: str, groups: list[dict[str, str]]) -> str:
    name = f"dp-{uuid.uuid4().hex[:8]}"
    response = call(url, "POST", "/v2/device_profiles", json=[{"name": name, "groups": groups}])
    assert response.status_code == 201, response.text
    return name


def bind(host: Host, profile_name: str, rp: str, headers: dict[str, str] | None = None) -> str:
    """One ARQ of the profile, bound to ``rp`` for a new instance; its uuid."""
    created = call(host.url, "POST", "/v2/accelerator_requests",
                   json={"device_profile_name": profile_name}, headers=headers or {})  # fmt: skip
    assert created.status_code == 201, created.text
    arq: str = created.json()["arqs"][0]["uuid"]
    ops = [
        {"path": "/hostname", "op": "add", "value": host.name},
        {"path": "/device_rp_uuid", "op": "add", "value": rp},
        {"path": "/instance_uuid", "op": "add", "value": str(uuid.uuid4())},
    ]
    patched = call(host.url, "PATCH", "/v2/accelerator_requests", json={arq: ops})
    assert patched.status_code == 202, patched.text
    return arq


def arq_of(url: str, arq: str) -> dict[str, Any]:
    found: dict[str, Any] = get(url, f"/v2/accelerator_requests/{arq}")
    return found


def fpga_group(**accel: str) -> list[dict[str, str]]:
    group = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}
    return [{**group, **{f"accel:{k}": v for k, v in accel.items()}}]


def new_function() -> str:
    """A function id of this test's own (the store is shared by the module's tests)."""
    return uuid.uuid4().hex


@pytest.fixture
def host(live_api: str, tmp_path: Path) -> Host:
    found = Host(live_api, tmp_path)
    found.report()
    return found


def test_a_bind_programs_the_region_with_phases_then_binds(host: Host) -> None:
    GZIP = new_function()
    bitstream = upload(host.url, REGION0_TYPE, GZIP, REGION0_TYPE)
    region = host.region()
    arq = bind(host, profile(host.url, fpga_group(function_id=GZIP)), region["rp_uuid"])
    waiting = arq_of(host.url, arq)
    assert waiting["state"] == "BindStarted" and waiting["phase"] == "queued"
    assert host.region()["program_phase"] == "queued"

    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")
    bound = arq_of(host.url, arq)
    assert bound["attach_handle_type"] == "TEST_PCI" and bound["phase"] is None
    assert [p for _, p in host.phases] == ["fetch", "verify", "program", "report"]
    after = host.region()
    assert after["function_uuid"] == GZIP and after["bitstream_id"] == bitstream
    assert after["program_phase"] is None and after["program_progress"] == 100
    assert host.programmed == 1
    # The agent's next scan shows the same: the fake card now holds gzip.
    host.report()
    assert host.region()["function_uuid"] == GZIP


def test_a_second_request_for_the_loaded_function_programs_nothing(host: Host) -> None:
    ZSTD = new_function()
    upload(host.url, REGION0_TYPE, ZSTD, REGION0_TYPE)
    name = profile(host.url, fpga_group(function_id=ZSTD))
    region = host.region()
    first = bind(host, name, region["rp_uuid"])
    second = bind(host, name, region["rp_uuid"])  # the region's other accelerator
    host.run_tasks(lambda: all(arq_of(host.url, a)["state"] == "Bound" for a in (first, second)))
    assert host.programmed == 1  # the second task found the function loaded
    third = bind(host, name, host.region("region0")["rp_uuid"])
    assert arq_of(host.url, third)["state"] == "BindFailed"  # two accelerators only
    assert host.region()["function_uuid"] == ZSTD


def test_a_bitstream_for_another_region_type_fails_the_bind(host: Host) -> None:
    # Declared for no region type, but its header says another interface.
    other = "11112222333344445555666677778888"
    bitstream = upload(host.url, other, new_function())
    name = profile(host.url, fpga_group(bitstream_id=bitstream))
    arq = bind(host, name, host.region()["rp_uuid"])
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "BindFailed")
    failed = arq_of(host.url, arq)
    assert "interface" in failed["failure_reason"] and other in failed["failure_reason"]
    region = host.region()
    assert region["program_phase"] == "failed" and "interface" in region["program_error"]
    assert region["function_uuid"] == PRELOADED and region["availability"] == "available"
    assert host.programmed == 0


def test_a_restarted_agent_reports_a_finished_task_without_programming_again(
    host: Host,
) -> None:
    GZIP = new_function()
    upload(host.url, REGION0_TYPE, GZIP, REGION0_TYPE)
    arq = bind(host, profile(host.url, fpga_group(function_id=GZIP)), host.region()["rp_uuid"])
    crashing = host.runner()
    real_update = crashing.client.update_task

    def lost_at_the_end(uuid: str, **fields: Any) -> Any:
        if fields["state"] == "done":
            crashing.stop()  # the agent dies before its last word arrives
            raise SystemExit("agent killed")
        return real_update(uuid, **fields)

    crashing.client.update_task = lost_at_the_end  # type: ignore[method-assign]
    (task,) = crashing.client.claim_tasks(host.name, 0)
    with pytest.raises(SystemExit):
        crashing.execute(task)
    assert host.programmed == 1 and arq_of(host.url, arq)["state"] == "BindStarted"

    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")  # the restarted agent
    assert host.programmed == 1


def test_a_request_unbound_before_its_task_ran_is_never_programmed(host: Host) -> None:
    GZIP = new_function()
    upload(host.url, REGION0_TYPE, GZIP, REGION0_TYPE)
    arq = bind(host, profile(host.url, fpga_group(function_id=GZIP)), host.region()["rp_uuid"])
    ops = [{"path": "/hostname", "op": "remove"}]
    assert call(host.url, "PATCH", "/v2/accelerator_requests", json={arq: ops}).ok
    assert host.runner().client.claim_tasks(host.name, 0) == []
    assert arq_of(host.url, arq)["state"] == "Unbound" and host.programmed == 0


def test_the_admin_program_api_is_asynchronous_and_refuses_a_region_in_use(
    host: Host,
) -> None:
    GZIP = new_function()
    bitstream = upload(host.url, REGION0_TYPE, GZIP, REGION0_TYPE)
    region = host.region()
    body = [{"path": "/program", "op": "replace", "value": [{"image_uuid": bitstream}]}]
    path = f"/v2/deployables/{region['uuid']}/program"
    response = call(host.url, "PATCH", path, json=body)
    assert response.status_code == 202 and response.json()["program_phase"] == "queued"
    again = call(host.url, "PATCH", path, json=body)
    assert again.status_code == 409 and "being programmed" in again.text
    member = {"X-Roles": "member", "X-Project-Id": "p1"}
    assert call(host.url, "PATCH", path, json=body, headers=member).status_code == 403
    host.run_tasks(lambda: host.region()["function_uuid"] == GZIP)
    assert host.region()["bitstream_id"] == bitstream

    arq = bind(host, profile(host.url, fpga_group()), region["rp_uuid"])
    assert arq_of(host.url, arq)["state"] == "Bound"
    busy = call(host.url, "PATCH", path, json=body)
    assert busy.status_code == 409 and arq in busy.text
    not_region = host.vgpu()["uuid"]
    refused = call(host.url, "PATCH", f"/v2/deployables/{not_region}/program", json=body)
    assert refused.status_code == 409 and "not a programmable region" in refused.text


def test_run_time_programming_by_the_requests_project(host: Host) -> None:
    ZSTD = new_function()
    mine = {"X-Roles": "member", "X-Project-Id": "tenant-a"}
    theirs = upload(host.url, REGION0_TYPE, new_function(), REGION0_TYPE)  # the admin's, private
    zstd = upload(host.url, REGION0_TYPE, ZSTD, REGION0_TYPE, headers=mine)
    region = host.region("region0")
    arq = bind(host, profile(host.url, fpga_group()), region["rp_uuid"], headers=mine)
    path = f"/v2/accelerator_requests/{arq}/program"
    other = {"X-Roles": "member", "X-Project-Id": "tenant-b"}
    assert (
        call(host.url, "POST", path, json={"bitstream_id": zstd}, headers=other).status_code == 404
    )
    hidden = call(host.url, "POST", path, json={"bitstream_id": theirs}, headers=mine)
    assert hidden.status_code == 404  # not a bitstream tenant-a may use
    two_ways = {"bitstream_id": zstd, "function_id": ZSTD}
    assert call(host.url, "POST", path, json=two_ways, headers=mine).status_code == 400
    response = call(host.url, "POST", path, json={"function_id": ZSTD}, headers=mine)
    assert response.status_code == 202, response.text
    assert response.json()["state"] == "Bound" and response.json()["phase"] == "queued"
    host.run_tasks(lambda: arq_of(host.url, arq)["phase"] is None)
    done = arq_of(host.url, arq)
    assert done["state"] == "Bound" and done["failure_reason"] is None
    assert host.region("region0")["function_uuid"] == ZSTD

    neighbour = bind(host, profile(host.url, fpga_group()), region["rp_uuid"])
    assert arq_of(host.url, neighbour)["state"] == "Bound"
    shared = call(host.url, "POST", path, json={"bitstream_id": zstd}, headers=mine)
    assert shared.status_code == 409 and neighbour in shared.text


def test_a_vgpu_is_made_for_the_bind_and_removed_after(host: Host) -> None:
    vgpu = host.vgpu()
    groups = [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}]
    arq = bind(host, profile(host.url, groups), vgpu["rp_uuid"])
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")
    handle = arq_of(host.url, arq)["attach_handle_uuid"]
    host.report()
    made = [h for h in host.vgpu()["attach_handles"] if h["uuid"] == handle]
    assert made[0]["host_in_use"] is True
    assert call(host.url, "DELETE", "/v2/accelerator_requests", params={"arqs": arq}).ok

    def removed() -> bool:
        host.report()
        return not any(h["host_in_use"] for h in host.vgpu()["attach_handles"])

    host.run_tasks(removed)


def test_the_all_in_one_configuration_runs_tasks(tmp_path: Path) -> None:
    """The runner's settings come from [agent] and [bitstreams]."""
    conf: cfg.ConfigOpts = confmod.load([], config_files=[], overrides={
        "DEFAULT": {"state_path": str(tmp_path), "host": "h"}, "agent": {"task_wait": 3},
    })  # fmt: skip
    settings = tasks.Settings.from_conf(conf)
    assert settings.cache_dir == tmp_path / "bitstream-cache"
    assert settings.journal == tmp_path / "agent-tasks.json" and settings.wait == 3
