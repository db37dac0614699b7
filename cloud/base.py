"""The reference cloud's foundations: where it lives (``.cloud/``), its processes and
the record of what runs where (``Cloud``, ``run/cloud.json``), virtualenvs, ports, and
waiting for a step to be done (cloud/launcher.py says what the cloud is)."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


CLOUD = REPO / "cloud"


HOME = Path(os.environ.get("ACCELERON_CLOUD_DIR", REPO / ".cloud"))


VENVS = HOME / "venvs"


# A second cloud of the same checkout runs beside the first with its own directory
# (.ci/run starts the suites of two lanes at once): ACCELERON_CLOUD_RUN.
RUN = Path(os.environ.get("ACCELERON_CLOUD_RUN", HOME / "run"))


STATE = RUN / "cloud.json"


LOGS = RUN / "logs"


MYSQL = "mysql+pymysql://root@127.0.0.1:3306"


POSTGRESQL = "postgresql+psycopg://postgres@127.0.0.1:5432"


REGION = "RegionOne"


COMPUTES = ("compute-1", "compute-2")


SERVICE_USERS = (
    "placement",
    "glance",
    "nova",
    "acceleron",
    "acceleron-events",
    "cyborg",
    "barbican",
)


# What serves the catalog's accelerator endpoint (Cloud.accelerator).
ACCELERON, CYBORG = "acceleron", "cyborg"


# The OpenStack services, each from its own lock file (cloud/requirements/<name>.txt).
# Adding one (tempest, say) is a lock file and a name here: `venv(name)` makes it.
SERVICES = ("keystone", "placement", "glance", "nova", "barbican")


WAIT = 180.0  # seconds any one step may take before the start is given up


# Acceleron's quotas come from Keystone's unified limits ([quota] driver =
# unified_limits): the accelerator service's registered limit (every project's default)
# of each resource class the cloud offers, high enough for the e2e suite, which sets
# project limits of its own (docs/quotas.md).
REGISTERED_LIMITS = {
    **{
        f"class:CUSTOM_ACCELERATOR_{kind}": 100
        for kind in ("FPGA", "QAT", "VGPU", "GPU", "MIG", "MIG_INSTANCE", "MEMORY")
    },
    "class:FPGA": 100,  # cyborg-tempest-plugin's profiles ask for resources:FPGA
}


class CloudError(Exception):
    """The cloud could not be brought up (or down); the message says where to look."""


def log(message: str) -> None:
    print(f"[cloud {time.strftime('%H:%M:%S')}] {message}", flush=True)


def uv() -> str:
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        raise CloudError("uv is needed to make the virtualenvs: run `make .venv/.installed`.")
    return found


def venv(name: str) -> Path:
    """The virtualenv of ``name`` from cloud/requirements/<name>.txt, made when missing
    or when its lock changed (Nova's also gets Acceleron for the weigher)."""
    lock = CLOUD / "requirements" / f"{name}.txt"
    path = VENVS / name
    VENVS.mkdir(parents=True, exist_ok=True)
    # One process at a time makes it (make test's adoption tests and make e2e's clouds
    # run at once in CI): another waits, then finds it made.
    with open(VENVS / f".{name}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        _make_venv(name, lock, path)
    return path


def _make_venv(name: str, lock: Path, path: Path) -> None:
    stamp = path / ".cloud-stamp"
    digest = hashlib.sha256(lock.read_bytes() + sys.version.encode()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == digest):
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        run([uv(), "venv", "-q", "--python", sys.executable, str(path)])
        run(
            [
                uv(),
                "pip",
                "install",
                "-q",
                "--python",
                str(path / "bin" / "python"),
                "-r",
                str(lock),
            ]
        )
        stamp.write_text(digest)
        log(f"virtualenv {name}: installed in {time.monotonic() - started:.1f} s")
    if name == "nova":  # editable: the weigher is the checkout's, whatever changes
        run(
            [
                uv(),
                "pip",
                "install",
                "-q",
                "--python",
                str(path / "bin" / "python"),
                "--no-deps",
                "-e",
                str(REPO),
            ]
        )


def run(argv: Sequence[str], env: Mapping[str, str] | None = None, what: str = "") -> str:
    """Run a setup command to its end; its output goes into the error when it fails."""
    result = subprocess.run(
        list(argv),
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=WAIT,
        check=False,
    )
    if result.returncode != 0:
        raise CloudError(
            f"{what or argv[0]} failed ({result.returncode}):\n{result.stdout[-3000:]}"
            f"{result.stderr[-3000:]}"
        )
    return result.stdout


VERSION_FILE = "src/acceleron/__init__.py"  # acceleron.__version__ names a release


@dataclasses.dataclass
class Process:
    argv: list[str]
    env: dict[str, str]
    pid: int = 0

    @property
    def alive(self) -> bool:
        if not self.pid:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        # A process that ended but that its parent (another launcher: `make e2e-upgrade`
        # runs pytest beside the one that started the cloud) has not reaped is a zombie.
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{self.pid}/stat").read_text()
            return stat.rsplit(")", 1)[1].split()[0] != "Z"
        return True


@dataclasses.dataclass
class Cloud:
    tag: str
    password: str
    ports: dict[str, int]
    nested: bool = True
    processes: dict[str, Process] = dataclasses.field(default_factory=dict)
    # ACCELERON, or CYBORG: upstream Cyborg serves the accelerator endpoint instead.
    accelerator: str = ACCELERON
    # The release Acceleron's processes started from (`up --release`, make e2e-upgrade):
    # its version; "" for the checkout.
    release: str = ""
    # Signed bitstreams (docs/bitstreams.md): the Barbican secret id of the CA the agents
    # trust, and the project whose requests get only signed bitstreams programmed.
    signing_ca: str = ""
    signed_project: str = ""

    # names ------------------------------------------------------------------------
    @property
    def vhost(self) -> str:
        return f"acceleron-cloud-{self.tag}"

    def database(self, name: str) -> str:
        return f"acccloud_{self.tag}_{name}"

    @property
    def mysql_databases(self) -> list[str]:
        names = ["keystone", "placement", "nova_api", "nova_cell0", "nova_cell1"]
        if self.cyborg:
            names.append("cyborg")
        return [self.database(n) for n in names]

    @property
    def cyborg(self) -> bool:
        """Whether upstream Cyborg, not Acceleron, serves the accelerator endpoint."""
        return self.accelerator == CYBORG

    @property
    def acceleron_port(self) -> str:
        """The port Acceleron's balancer listens on: the accelerator endpoint's, or in a
        Cyborg cloud one of its own (`python -m cloud acceleron`)."""
        return "acceleron" if self.cyborg else "accelerator"

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    @property
    def auth_url(self) -> str:
        return f"{self.url('keystone')}/v3"

    @property
    def endpoints(self) -> dict[str, tuple[str, str]]:
        """Catalog: service type -> (service name, endpoint URL)."""
        return {
            "placement": ("placement", self.url("placement")),
            "image": ("glance", self.url("glance")),
            "compute": ("nova", f"{self.url('nova')}/v2.1"),
            "network": ("neutron-standin", self.url("neutron")),
            "accelerator": (self.accelerator, f"{self.url('accelerator')}/v2"),
            "key-manager": ("barbican", self.url("barbican")),
        }

    # persistence -------------------------------------------------------------------
    def save(self) -> None:
        STATE.write_text(json.dumps(dataclasses.asdict(self), indent=2) + "\n")

    @classmethod
    def load(cls) -> Cloud | None:
        try:
            data = json.loads(STATE.read_text())
        except FileNotFoundError:
            return None
        processes = {k: Process(**v) for k, v in data.pop("processes").items()}
        return cls(**data, processes=processes)

    @property
    def running(self) -> bool:
        return any(p.alive for p in self.processes.values())

    # processes ---------------------------------------------------------------------
    def start(
        self, name: str, argv: list[str] | None = None, env: dict[str, str] | None = None
    ) -> None:
        """Start (or start again) the process ``name``: its own session, its output
        appended to run/logs/<name>.log."""
        process = self.processes.get(name) or Process(argv or [], env or {})
        with (LOGS / f"{name}.log").open("ab") as out:
            child = subprocess.Popen(
                process.argv,
                env={**os.environ, **process.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                cwd=RUN,
            )
        process.pid = child.pid
        self.processes[name] = process
        self.save()

    def stop(self, name: str, sig: int = signal.SIGTERM, wait: float = 10.0) -> None:
        """Stop the process ``name`` (and its children: its process group)."""
        process = self.processes[name]
        if not process.alive:
            return
        with _suppress_lookup():
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(process.pid, os.WNOHANG)
            except ChildProcessError:  # not our child (another launcher started it)
                done = 0 if process.alive else process.pid
            if done:
                return
            time.sleep(0.1)
        with _suppress_lookup():
            os.killpg(process.pid, signal.SIGKILL)

    def stop_all(self, wait: float = 10.0) -> None:
        """Stop every process at once: SIGTERM, then SIGKILL for those still there."""
        running = [p for p in self.processes.values() if p.alive]
        for process in running:
            with _suppress_lookup():
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_reap(p) for p in running):
            time.sleep(0.2)
        for process in running:
            if _reap(process):
                with _suppress_lookup():
                    os.killpg(process.pid, signal.SIGKILL)


def _reap(process: Process) -> bool:
    """Whether the process still runs (a child of ours that ended is reaped)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(process.pid, os.WNOHANG)
    return process.alive


class _suppress_lookup:
    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> bool:
        return kind is not None and issubclass(kind, ProcessLookupError)


def free_ports(names: Iterable[str]) -> dict[str, int]:
    """A free port on 127.0.0.1 for each name (the sockets are closed again: a race
    with another program is possible, and shows as a service that cannot bind)."""
    sockets: dict[str, socket.socket] = {}
    try:
        for name in names:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets[name] = sock
        return {name: sock.getsockname()[1] for name, sock in sockets.items()}
    finally:
        for sock in sockets.values():
            sock.close()


def wait_for(
    what: str,
    ready: Callable[[], bool],
    cloud: Cloud,
    logs: Sequence[str] = (),
    timeout: float = WAIT,
) -> None:
    """Poll ``ready`` until it is true; give up with the tail of ``logs``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name in logs:
            if not cloud.processes[name].alive:
                raise CloudError(f"{name} exited while waiting for {what}:\n{tail(name)}")
        try:
            if ready():
                return
        except Exception:  # not up yet: refused, reset, 5xx
            pass
        time.sleep(0.5)
    raise CloudError(
        f"{what}: not ready after {timeout:.0f} s\n" + "\n".join(tail(name) for name in logs)
    )


def answers(url: str) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return bool(response.status < 500)
        except urllib.error.HTTPError as error:
            return error.code < 500

    return check


def tail(name: str, lines: int = 40) -> str:
    path = LOGS / f"{name}.log"
    if not path.exists():
        return f"(no log for {name})"
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return f"--- {path} (last {len(text)} lines)\n" + "\n".join(text)


# The test users besides the admin: name -> (project, roles). Each service user has the
# least it needs (docs/deploy-with-nova.md says why).
USERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "member": ("demo", ("member",)),
    "alt-member": ("alt", ("member",)),
    # A member of the project whose requests get only signed bitstreams programmed
    # ([bitstreams] require_signatures_projects of the agents).
    "signer": ("signed", ("member",)),
    "reader": ("demo", ("reader",)),
    "placement": ("service", ("service",)),
    "glance": ("service", ("service",)),
    "nova": ("service", ("service",)),
    # Acceleron: Placement, Keystone and its own API want `service`; Glance lets only
    # `member`s download an image (even a public one).
    "acceleron": ("service", ("service", "member")),
    # Acceleron's [nova] user: Nova takes events from `service` but looks the instances
    # up in the caller's own project unless the caller is an `admin`.
    "acceleron-events": ("service", ("service", "admin")),
    # Upstream Cyborg's (`up --cyborg`): its tokens, Placement, and Nova's events as above.
    "cyborg": ("service", ("service", "admin")),
    "barbican": ("service", ("service",)),
}


def restart(cloud: Cloud, name: str) -> None:
    """Stop and start one process; a server is waited for until it answers."""
    cloud.stop(name)
    cloud.start(name)
    port = {"nova-api": "nova", "neutron-standin": "neutron", "balancer": "accelerator"}
    service = port.get(name, name)
    if service in cloud.ports:
        wait_for(name, answers(cloud.url(service)), cloud, [name])
