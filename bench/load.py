"""A small HTTP/1.1 load generator: N keep-alive connections, latency percentiles.

Written on asyncio streams so the client costs little CPU next to the server
under test (this machine has two cores).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Request = tuple[str, str, bytes]  # method, path, body
# The groups of every device profile the bench scripts create: an FPGA with a trait
# and a function, and two GPUs without a trait.
GROUPS = [
    {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required",
        "accel:function_id": "8411555e-3cbf-47de-988c-b5e30bbfa035",
    },
    {"resources:CUSTOM_ACCELERATOR_GPU": "2", "trait:CUSTOM_GPU_NVIDIA": "forbidden"},
]


@dataclasses.dataclass
class Result:
    name: str
    requests: int
    seconds: float
    latencies: list[float]
    statuses: collections.Counter[int]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] * 1000

    def line(self) -> str:
        ok = sum(n for s, n in self.statuses.items() if s < 400)
        return (
            f"{self.name:<50} {self.rate:8.0f} req/s   p50 {self.percentile(50):6.1f} ms   "
            f"p99 {self.percentile(99):6.1f} ms   ({self.requests} requests, {ok} ok, "
            f"mean {statistics.mean(self.latencies) * 1000:.1f} ms)"
        )


async def exchange(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    host: str,
    request: Request,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    method, path, body = request
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"OpenStack-API-Version: accelerator latest\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body)
    await writer.drain()
    status = int((await reader.readline()).split()[1])
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        if name.lower() == "content-length":
            length = int(value)
    return status, await reader.readexactly(length)


async def _worker(
    url: tuple[str, int], requests: Iterator[Request], deadline: float, result: Result
) -> None:
    reader, writer = await asyncio.open_connection(*url)
    try:
        for request in requests:
            if time.perf_counter() >= deadline:
                break
            started = time.perf_counter()
            status, _ = await exchange(reader, writer, url[0], request)
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] += 1
            result.requests += 1
    finally:
        writer.close()


def run(
    name: str,
    base_url: str,
    make_requests: Callable[[int], Iterator[Request]],
    clients: int = 16,
    seconds: float = 10.0,
) -> Result:
    """Drive ``clients`` connections for ``seconds`` (or until their requests run out)."""
    host, port = base_url.removeprefix("http://").split(":")
    result = Result(name, 0, 0.0, [], collections.Counter())

    async def main() -> None:
        deadline = time.perf_counter() + seconds
        await asyncio.gather(
            *(
                _worker((host, int(port)), make_requests(i), deadline, result)
                for i in range(clients)
            )
        )

    started = time.perf_counter()
    asyncio.run(main())
    result.seconds = time.perf_counter() - started
    return result


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Url(str):
    """A server's URL, with the process id of the server (for its CPU time)."""

    pid: int = 0
    profile: Path | None = None  # where its cProfile goes (bench/profiled.py)


@contextmanager
def profiling(url: Url) -> Iterator[None]:
    """Profile the server (started with ``profile``) while the block runs: its
    statistics are in ``url.profile`` after it."""
    if url.profile is None:
        yield
        return
    os.kill(url.pid, signal.SIGUSR1)
    try:
        yield
    finally:
        os.kill(url.pid, signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not url.profile.exists() and time.monotonic() < deadline:
            time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) a process has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def all_in_one(
    extra_args: tuple[str, ...] = (),
    config: str = "",
    source: Path | None = None,
    profile: Path | None = None,
) -> Iterator[Url]:
    """Start ``acceleron all-in-one`` as ``make run`` does, in a fresh data directory;
    ``config``: the text of a configuration file to start it with; ``source``: the
    ``src`` directory of another checkout to run instead of this one (a baseline);
    ``profile``: where the server writes the cProfile that ``profiling`` takes (see
    bench/profiled.py)."""
    port = free_port()
    acceleron: list[str] = [str(Path(sys.executable).parent / "acceleron")]
    if profile is not None:
        acceleron = [sys.executable, str(Path(__file__).parent / "profiled.py")]
    with tempfile.TemporaryDirectory() as data_dir:
        log = open(Path(data_dir) / "server.log", "w")  # noqa: SIM115
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        if profile is not None:
            env["ACCELERON_PROFILE"] = str(profile)
        if source is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(source), env.get("PYTHONPATH", "")])
        conf_file = Path(data_dir) / "acceleron.conf"
        conf_file.write_text(config)
        process = subprocess.Popen(
            [
                *acceleron,
                "--config-file",
                str(conf_file),
                "all-in-one",
                "--data-dir",
                data_dir,
                "--port",
                str(port),
                *extra_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        url = Url(f"http://127.0.0.1:{port}")
        url.pid = process.pid
        url.profile = profile
        started = time.perf_counter()
        try:
            wait_ready(url, process)
            print(f"server ready in {time.perf_counter() - started:.2f} s at {url}")
            yield url
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """The ``src`` directory of commit ``rev`` of this repository, in a temporary place."""
    root = Path(__file__).resolve().parent.parent
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp) / "src"


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url + "/", timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("the server did not become ready")


async def connect(url: str) -> tuple[str, asyncio.StreamReader, asyncio.StreamWriter]:
    """A keep-alive connection to ``url`` (http://host:port): its host, reader, writer."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    return host, reader, writer


async def binder(
    url: str,
    profile: str,
    pools: list[tuple[str, str]],
    worker: int,
    step: int,
    deadline: float,
    result: Result,
    instances: list[str],
) -> None:
    """Nova's two calls in a loop until ``deadline``: create a request of ``profile``,
    bind it to a (host, provider) of ``pools`` (the ``worker``-th, then every ``step``-th
    after it) for a new instance, recorded in ``instances``; binds answered 202 count."""
    host, reader, writer = await connect(url)
    n = worker
    try:
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            create = ("POST", "/v2/accelerator_requests", body({"device_profile_name": profile}))
            status, created = await exchange(reader, writer, host, create)
            arq = json.loads(created)["arqs"][0]["uuid"]
            instance = str(uuid.uuid4())
            hostname, rp = pools[n % len(pools)]
            ops = [{"op": "add", "path": "/hostname", "value": hostname},
                   {"op": "add", "path": "/device_rp_uuid", "value": rp},
                   {"op": "add", "path": "/instance_uuid", "value": instance}]  # fmt: skip
            bind = ("PATCH", "/v2/accelerator_requests", body({arq: ops}))
            status, _ = await exchange(reader, writer, host, bind)
            result.latencies.append(time.perf_counter() - started)
            result.statuses[status] += 1
            if status == 202:
                result.requests += 1
            instances.append(instance)
            n += step
    finally:
        writer.close()


def body(data: Any) -> bytes:
    return json.dumps(data).encode()


def call(url: str, method: str, path: str, data: Any = None, raw: bytes | None = None) -> Any:
    """One request to the API at the latest microversion: ``data`` as JSON, or ``raw``
    bytes (a bitstream); the JSON answer, or None."""
    content = raw if raw is not None else (body(data) if data is not None else None)
    request = urllib.request.Request(url + path, data=content, method=method)
    request.add_header("OpenStack-API-Version", "accelerator latest")
    ctype = "application/octet-stream" if raw is not None else "application/json"
    request.add_header("Content-Type", ctype)
    with urllib.request.urlopen(request, timeout=120) as response:
        text = response.read()
        return json.loads(text) if text else None


def fake_reports(names: list[str], inventory: str) -> dict[str, bytes]:
    """Each named host's report of the fake driver's devices of ``inventory`` (its
    YAML), as the agent on that host sends it."""
    from acceleron import conf as confmod
    from acceleron.drivers.fake import FakeDriver
    from acceleron.report import HostReport, to_bytes

    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "inventory.yaml"
        path.write_text(inventory)
        for name in names:
            conf = confmod.load(
                [],
                config_files=[],
                overrides={
                    "DEFAULT": {"host": name, "state_path": tmp},
                    "fake": {"inventory_file": str(path)},
                },
            )
            devices = tuple(FakeDriver(conf, Path("/")).discover())
            found[name] = to_bytes(HostReport(name, "bench", devices))
    return found


def report_fake_hosts(url: str, names: list[str], inventory: str) -> None:
    """Report each host through the agents' API with the fake driver's devices of
    ``inventory`` (its YAML), as an agent on that host would."""
    for name, report in fake_reports(names, inventory).items():
        request = urllib.request.Request(f"{url}/v2/hosts/{name}/report", data=report, method="PUT")
        request.add_header("OpenStack-API-Version", "accelerator latest")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=120):
            pass


def wait_synced(url: str, names: list[str], timeout: float | None = None) -> float:
    """Seconds until Placement has every named host's latest inventory; by default
    waiting 600 s plus a second a host (a slow machine publishes 1,000 in 10 minutes),
    and asking less often the more hosts there are (each look lists them all, in the
    server that is publishing them)."""
    limit = 600 + len(names) if timeout is None else timeout
    pause = min(2.0, 0.2 + len(names) / 500)
    started = time.monotonic()
    while True:
        hosts = {h["hostname"]: h for h in call(url, "GET", "/v2/hosts")["hosts"]}
        if all(hosts.get(n, {}).get("placement_synced") for n in names):
            return time.monotonic() - started
        if time.monotonic() - started > limit:
            raise RuntimeError(f"the hosts did not reach Placement in {limit:g} s")
        time.sleep(pause)


def fake_hosts(hosts: int, prefix: str) -> tuple[Any, Any]:
    """A fresh SQLite database under a temporary state path holding ``hosts`` hosts of
    the fake driver's default inventory, reported; the configuration and the database."""
    from acceleron import conf as confmod
    from acceleron.db import migrate
    from acceleron.db.session import Database
    from acceleron.drivers.fake import FakeDriver
    from acceleron.report import HostReport
    from acceleron.service import inventory

    state = Path(tempfile.mkdtemp(prefix=prefix))
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"state_path": str(state)}})
    db = Database(f"sqlite:///{state / 'acceleron.sqlite'}")
    migrate.upgrade(db)
    for i in range(hosts):
        conf.set_override("host", f"host-{i:03d}")
        devices = tuple(FakeDriver(conf, Path("/")).discover())
        inventory.reconcile(db, HostReport(f"host-{i:03d}", "1", devices))
    return conf, db
