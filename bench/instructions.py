"""Instructions a device profile show and create cost the all-in-one, under callgrind.

On the 2 shared cores of the development machine the CPU time of a request moves by a
third between runs of the same code (what the host's other guests do beside); the
instructions its thread executes do not. This starts ``acceleron all-in-one`` (as
``make run`` does; ``--source`` another checkout's ``src`` for a baseline) under
valgrind's callgrind with collection off, creates 50 profiles, waits until it is idle,
then for a show of one of them and a create of a new one: 30 requests to warm up,
collection on, ``--requests`` requests on one keep-alive connection, collection off. It
prints the instructions of the event loop's thread (where every request of these two
is served, SQLite included) per request. The start takes a minute or two under valgrind.

    apt-get install valgrind
    .venv/bin/python bench/instructions.py [--requests 200] [--source ../other/src]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from load import GROUPS, Url, free_port, wait_ready
from profile_wrk import HEADERS, PATH, post, settle

ROOT = Path(__file__).resolve().parent.parent


def callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def loop_instructions(prefix: str, dump: int) -> int:
    """The instructions of the main thread (the event loop's: callgrind numbers threads
    from 1) in the ``dump``-th dump."""
    text = Path(f"{prefix}.{dump}-01").read_text(errors="replace")
    return next(int(line.split()[1]) for line in text.splitlines() if line.startswith("totals:"))


def measure(source: Path | None, requests: int) -> dict[str, float]:
    port = free_port()
    with tempfile.TemporaryDirectory() as data_dir:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        if source is not None:
            env["PYTHONPATH"] = str(source)
        (Path(data_dir) / "acceleron.conf").write_text("")
        out = Path(data_dir) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
            f"--callgrind-out-file={out}", sys.executable,
            str(Path(sys.executable).parent / "acceleron"), "--config-file",
            str(Path(data_dir) / "acceleron.conf"), "all-in-one", "--data-dir", data_dir,
            "--port", str(port),
        ]  # fmt: skip
        with open(Path(data_dir) / "server.log", "w") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
            try:
                url = Url(f"http://127.0.0.1:{port}")
                url.pid = process.pid
                wait_ready(url, process, timeout=900)
                return _requests(url, port, process.pid, str(out), requests)
            finally:
                process.terminate()
                process.wait(timeout=120)


def _requests(url: Url, port: int, pid: int, out: str, requests: int) -> dict[str, float]:
    uuids = [post(url, f"seed-{n:03d}") for n in range(50)]
    settle(url, timeout=900)  # the start's work done (the agent's report, its sync)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    groups = json.dumps(GROUPS)

    def ask(method: str, path: str, body: str | None, status: int) -> None:
        connection.request(method, path, body=body, headers=HEADERS)
        answer = connection.getresponse()
        answer.read()
        if answer.status != status:
            raise RuntimeError(f"{method} {path}: {answer.status}")

    def show(n: int) -> None:
        ask("GET", f"{PATH}/{uuids[n % len(uuids)]}", None, 200)

    def create(n: int) -> None:
        ask("POST", PATH, f'[{{"name": "counted-{n}", "groups": {groups}}}]', 201)

    found = {}
    kinds: tuple[tuple[str, Callable[[int], None]], ...] = (("show", show), ("create", create))
    for dump, (what, request) in enumerate(kinds, start=1):
        for n in range(30):
            request(requests + n)
        callgrind(pid, "--zero")
        callgrind(pid, "--instr=on")
        for n in range(requests):
            request(n)
        callgrind(pid, "--instr=off")
        callgrind(pid, f"--dump={what}")
        found[what] = loop_instructions(out, dump) / requests
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--source", type=Path, help="another checkout's src (a baseline)")
    args = parser.parse_args()
    found = measure(args.source, args.requests)
    for what, count in found.items():
        print(f"{what:<8}{count / 1e6:7.3f} M instructions a request (the event loop's thread)")


if __name__ == "__main__":
    main()
