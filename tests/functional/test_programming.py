"""Binding with programming, end to end over HTTP: a live API, the agent's task runner
with the fake driver, the local bitstream store.

Covers the phases the agent reports, the region recorded afterwards, a bitstream the
region cannot take, an agent restarted mid-task (never programming twice), a bind
unbound before its task ran, the admin's program API, run-time reprogramming by the
request's project, and vGPUs made and removed for a bind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.agent import tasks
from acceleron.cli.main import main
from tests.fixtures.host import Host, arq_of, bind, call, get, profile, upload
from tests.fixtures.server import serve_on_sqlite

REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"  # what region0 holds at start


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


def test_a_corrupt_bitstream_fails_the_bind_naming_both_hashes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Bytes in the local store that no longer match their recorded hash: the bind fails
    saying the bitstream is corrupt, with the recorded and the actual sha256, and the
    API logs no traceback (it refused before the first byte of its answer)."""
    state = tmp_path / "api"
    with serve_on_sqlite(state) as url:
        host = Host(url, tmp_path / "host")
        host.report()
        bitstream = upload(url, REGION0_TYPE, new_function(), REGION0_TYPE)
        recorded = get(url, f"/v2/bitstreams/{bitstream}")["hash_value"]
        stored = state / "bitstreams" / recorded
        damaged = stored.read_bytes()[:-4] + b"rot!"  # same size, other bytes
        stored.write_bytes(damaged)
        actual = hashlib.sha256(damaged).hexdigest()
        arq = bind(host, profile(url, fpga_group(bitstream_id=bitstream)), host.region()["rp_uuid"])
        with caplog.at_level(logging.INFO):
            host.run_tasks(lambda: arq_of(url, arq)["state"] == "BindFailed")
        reason, error = arq_of(url, arq)["failure_reason"], host.region()["program_error"]
    for said in (reason, error):
        assert "corrupt" in said and recorded in said and actual in said, said
    assert host.programmed == 0
    tracebacks = [r for r in caplog.records if r.exc_info or "Traceback" in r.getMessage()]
    assert not tracebacks, [r.getMessage() for r in tracebacks]


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
    # openstacksdk's path repeats the uuid: the same call; another uuid there is no path.
    sdk_path = f"{path}/{region['uuid'].upper()}"
    assert "being programmed" in call(host.url, "PATCH", sdk_path, json=body).text
    other = call(host.url, "PATCH", f"{path}/{host.vgpu()['uuid']}", json=body)
    assert other.status_code == 404 and "the two uuids differ" in other.text
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
    assert shared.status_code == 409 and neighbour not in shared.text  # another project's


def test_a_vgpu_is_made_for_the_bind_and_removed_after(host: Host) -> None:
    vgpu = host.vgpu()
    groups = [{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}]
    arq = bind(host, profile(host.url, groups), vgpu["rp_uuid"])
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")
    handle = arq_of(host.url, arq)["attach_handle_uuid"]
    host.report()
    made = [h for h in host.vgpu()["attach_handles"] if h["address"] == handle]  # the mdev
    assert made[0]["host_in_use"] is True
    assert call(host.url, "DELETE", "/v2/accelerator_requests", params={"arqs": arq}).ok

    def removed() -> bool:
        host.report()
        return not any(h["host_in_use"] for h in host.vgpu()["attach_handles"])

    host.run_tasks(removed)


def test_the_all_in_one_configuration_runs_tasks(tmp_path: Path) -> None:
    """The runner's settings come from [agent] and [bitstreams]."""
    conf: cfg.ConfigOpts = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(tmp_path), "host": "h"},
            "agent": {"task_wait": 3},
        },
    )
    settings = tasks.Settings.from_conf(conf)
    assert settings.cache_dir == tmp_path / "bitstream-cache"
    assert settings.journal == tmp_path / "agent-tasks.json" and settings.wait == 3


def test_the_cli_programs_a_region_and_follows_its_phases(
    host: Host, capsys: pytest.CaptureFixture[str]
) -> None:
    GZIP = new_function()
    bitstream = upload(host.url, REGION0_TYPE, GZIP, REGION0_TYPE)
    region = host.region()
    argv = ["--os-url", host.url, "deployable", "program", region["name"], bitstream]  # by name
    with host.working():
        code = main([*argv, "-f", "json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["function_uuid"] == GZIP
    lines = err.splitlines()
    assert lines[0].startswith(f"{region['name']}: queued") or "fetch" in lines[0]
    assert lines[-1] == f"{region['name']}: done"
    # A region in use: the API's refusal, in one line.
    arq = bind(host, profile(host.url, fpga_group()), region["rp_uuid"])
    assert arq_of(host.url, arq)["state"] == "Bound"
    assert main([*argv, "--no-wait"]) == 1
    assert capsys.readouterr().err == (
        f"{region['name']} cannot be programmed now: accelerator request(s) {arq} use it with "
        "what it holds now.\n"
    )


def test_the_cli_reprograms_a_bound_request(host: Host, capsys: pytest.CaptureFixture[str]) -> None:
    ZSTD = new_function()
    upload(host.url, REGION0_TYPE, ZSTD, REGION0_TYPE)
    arq = bind(host, profile(host.url, fpga_group()), host.region()["rp_uuid"])
    argv = ["--os-url", host.url, "arq", "program", arq, "--function-id", ZSTD, "-f", "json"]
    with host.working():
        code = main(argv)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["state"] == "Bound" and err.splitlines()[-1] == f"{arq}: done"
    assert host.region()["function_uuid"] == ZSTD
