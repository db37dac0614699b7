"""An agent that requires signatures, handed program tasks as an API of task format 1.0
writes them (no project_id, no signature): every such bitstream is unsigned to it, so it
is refused where the host verifies every signature, and programmed where only listed
projects' requests need one (a task that names no project is no listed project's)."""

from __future__ import annotations

from pathlib import Path

from acceleron.agent import tasks
from acceleron.drivers import gbs
from acceleron.drivers.fake import FakeDriver
from tests.fixtures.tasks import REGION_TYPE, Api, conf, program_task


def run_old_task(tmp_path: Path, **signature_options: object) -> tuple[Api, FakeDriver]:
    settings = conf(tmp_path)
    for name, value in signature_options.items():
        settings.set_override(name, value, group="bitstreams")
    data = gbs.build(REGION_TYPE, ("cd" * 16,), b"\1" * 1000)
    driver = FakeDriver(settings, Path("/"))
    api = Api(data)
    runner = tasks.TaskRunner(tasks.Settings.from_conf(settings), [driver], api)  # type: ignore[arg-type]
    runner.execute(program_task(driver, data))
    return api, driver


def functions(driver: FakeDriver) -> set[str]:
    device = next(d for d in driver.discover() if d.type == "FPGA")
    return {f for d in device.deployables if d.key == "region0" for f in d.function_uuids}


def test_a_host_verifying_every_signature_refuses_an_older_apis_task(tmp_path: Path) -> None:
    api, driver = run_old_task(tmp_path, verify_signatures=True)
    (end,) = [u for u in api.updates if u["state"] != "running"]
    assert end["state"] == "failed" and "signature refused (unsigned)" in end["error"]
    assert "cd" * 16 not in functions(driver)


def test_a_host_requiring_signatures_per_project_programs_a_task_of_no_project(
    tmp_path: Path,
) -> None:
    api, driver = run_old_task(tmp_path, require_signatures_projects=["p1"])
    (end,) = [u for u in api.updates if u["state"] != "running"]
    assert end["state"] == "done", end
    assert "cd" * 16 in functions(driver)
