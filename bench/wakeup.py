"""How long a queued task waits before the agent starts it: polling against wake-up.

1. **All-in-one** (SQLite, the embedded Placement, the fake driver's agent in the same
   process): bind a request whose profile names a function to a fake FPGA region, as
   ``bench/bind.py`` does, and time the ``queued`` phase the request shows (from the
   bind's answer until the agent reports its first phase). Functions alternate, so
   every bind programs; each request is deleted before the next, and the process left
   1.5 s to settle (the agent rescans after a program). Run once with
   ``[api] task_wakeup = poll`` (the baseline) and once with ``notify``.
2. **Across processes, PostgreSQL** (with ``--database``): ``acceleron api`` serves an
   agent's long poll (``POST /v2/hosts/{host}/tasks/claim?wait=20``) while this
   process, as another API replica would, queues a task for that host in the same
   database; time from the commit until the poll answers. ``poll`` against ``notify``
   (LISTEN/NOTIFY).

    .venv/bin/python bench/wakeup.py [--binds 8] [--database postgresql+psycopg://…]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path

from bind import REGION_TYPE, timed_bind, upload
from load import all_in_one, call, free_port, wait_ready

MODES = ("poll", "notify")


def all_in_one_queued(mode: str, binds: int) -> list[float]:
    """Seconds each programming bind spent queued, with ``task_wakeup = mode``."""
    with all_in_one(config=f"[api]\ntask_wakeup = {mode}\n") as url:
        names = []
        for _ in range(2):
            function = uuid.uuid4().hex
            upload(url, function, 1)
            name = f"fn-{function[:6]}"
            group = {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_id": function}
            call(url, "POST", "/v2/device_profiles", [{"name": name, "groups": [group]}])
            names.append(name)
        region = next(
            d
            for d in call(url, "GET", "/v2/deployables?kind=region")["deployables"]
            if d["region_type"] == REGION_TYPE
        )
        queued = []
        for n in range(binds):
            phases = dict(timed_bind(url, names[n % 2], region["rp_uuid"], region["hostname"]))
            queued.append(phases.get("queued", 0.0))
            for arq in call(url, "GET", "/v2/accelerator_requests")["arqs"]:
                call(url, "DELETE", f"/v2/accelerator_requests?instance={arq['instance_uuid']}")
            time.sleep(1.5)  # the agent's rescan and the Placement sync after a program end
        return queued


def across_processes(database: str, mode: str, rounds: int) -> list[float]:
    """Seconds from a task's commit in this process until another process's long poll
    for its host answers, with ``task_wakeup = mode`` in that process."""
    from acceleron.db import migrate
    from acceleron.db.session import Database
    from acceleron.service import tasks

    db = Database(database)
    migrate.upgrade(db)
    db.notify_channels = mode == "notify"  # this process is one API replica of the two
    port = free_port()
    acceleron = Path(sys.executable).parent / "acceleron"
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "acceleron.conf"
        conf.write_text(
            f"[DEFAULT]\nstate_path = {tmp}\n[database]\nconnection = {database}\n"
            f"[placement]\nmode = disabled\n[api]\ntask_wakeup = {mode}\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        log = open(Path(tmp) / "api.log", "w")  # noqa: SIM115
        process = subprocess.Popen(
            [str(acceleron), "--config-file", str(conf), "api", "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(url, process)
            time.sleep(1.0)  # the LISTEN connection comes up beside the start
            return [_one_round(url, db, tasks) for _ in range(rounds)]
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
            db.dispose()


def _one_round(url: str, db: object, tasks: object) -> float:
    host = f"bench-{uuid.uuid4().hex[:8]}"
    answered: list[float] = []

    def poll() -> None:
        request = urllib.request.Request(
            f"{url}/v2/hosts/{host}/tasks/claim?wait=20", data=b"", method="POST"
        )
        request.add_header("OpenStack-API-Version", "accelerator latest")
        with urllib.request.urlopen(request, timeout=60) as response:
            assert json.loads(response.read())["tasks"]
        answered.append(time.perf_counter())

    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.3)  # the poll is waiting now
    with db.writer() as conn:  # type: ignore[attr-defined]
        tasks.create(conn, hostname=host, kind="create_mdev", params={})  # type: ignore[attr-defined]
    committed = time.perf_counter()
    thread.join()
    return answered[0] - committed


def show(title: str, figures: dict[str, list[float]]) -> None:
    print(f"\n{title}")
    for mode, seconds in figures.items():
        ms = sorted(s * 1000 for s in seconds)
        print(
            f"    task_wakeup = {mode:<7} median {statistics.median(ms):7.1f} ms   "
            f"min {ms[0]:7.1f} ms   max {ms[-1]:7.1f} ms   ({len(ms)} tasks)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binds", type=int, default=8, help="programming binds per mode")
    parser.add_argument("--database", help="a PostgreSQL URL for the across-processes figure")
    args = parser.parse_args()
    show(
        "all-in-one: programming bind, queued before the agent starts (baseline: poll)",
        {mode: all_in_one_queued(mode, args.binds) for mode in MODES},
    )
    if args.database:
        show(
            "across processes (PostgreSQL): task committed -> another process's poll answers",
            {m: across_processes(args.database, m, args.binds) for m in MODES},
        )


if __name__ == "__main__":
    main()
