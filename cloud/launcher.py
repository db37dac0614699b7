"""Bring the reference cloud up on 127.0.0.1, and take it down (``make cloud``,
``make cloud-stop``; docs/deploy-with-nova.md describes what runs).

Everything it makes lives under ``.cloud/`` of the checkout (or
``$ACCELERON_CLOUD_DIR``):

* ``venvs/<service>/``: one virtualenv per OpenStack service, from the locked
  requirements in ``cloud/requirements/`` (their pins clash, so one each), made again
  only when the lock changes; Nova's also holds Acceleron (``--no-deps``, editable)
  for the weigher;
* ``run/``: the running cloud: configuration, data, one log per process under
  ``run/logs/``, and ``run/cloud.json``, which says what runs where (ports, process
  ids, databases, credentials); ``run/clouds.yaml`` and ``run/env/<user>.sh`` hold
  the credentials of every test user for openstacksdk, the ``openstack`` CLI and
  scripts (``source .cloud/run/env/admin.sh``).

Ports are free ones chosen at start; databases and the RabbitMQ vhost carry a random
tag, so that clouds of several checkouts can run side by side.

``python -m cloud up --cyborg`` runs upstream Cyborg (cyborg-api, cyborg-conductor and
a cyborg-agent per compute with its fake driver, from ``venvs/cyborg``) as the
``accelerator`` service instead of Acceleron.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import string
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CLOUD = REPO / "cloud"
HOME = Path(os.environ.get("ACCELERON_CLOUD_DIR", REPO / ".cloud"))
VENVS = HOME / "venvs"
RUN = HOME / "run"
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
        for kind in ("FPGA", "QAT", "VGPU", "GPU", "MIG", "MEMORY")
    },
    "class:FPGA": 100,  # cyborg-tempest-plugin's profiles ask for resources:FPGA
}


class CloudError(Exception):
    """The cloud could not be brought up (or down); the message says where to look."""


def log(message: str) -> None:
    print(f"[cloud {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------
# Virtualenvs


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
    return path


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


# ---------------------------------------------------------------------------------------
# Releases: the previous one, to upgrade from (`up --release`, make e2e-upgrade)

VERSION_FILE = "src/acceleron/__init__.py"  # acceleron.__version__ names a release


def git(*argv: str) -> str:
    return run(["git", "-C", str(REPO), *argv], what=f"git {argv[0]}")


def version_of(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("__version__ = "):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise CloudError(f"no __version__ in {VERSION_FILE}")


def previous_release() -> str:
    """The commit of the newest release older than the checkout: the last commit whose
    ``__version__`` names it, i.e. the parent of the commit that moved ``__version__`` on
    to the next ``.dev0`` (CONTRIBUTING.md, "Releases"). Found in the history, not by
    its tag: a fresh clone has no tags."""
    current = version_of((REPO / VERSION_FILE).read_text())
    for line in git("log", "--format=%H %P", "--", VERSION_FILE).splitlines():
        before = [*line.split(), ""][1]  # the commit's (first) parent
        if not before:
            break
        version = version_of(git("show", f"{before}:{VERSION_FILE}"))
        if ".dev" not in version and version != current:
            return before
    raise CloudError("no earlier release in the history (a shallow clone? `git fetch --unshallow`)")


def release_venv(ref: str) -> str:
    """The release at ``ref`` (a commit or tag) installed from its own requirements.lock:
    its files (``git archive``) under releases/<version>/, its virtualenv in
    venvs/acceleron-<version>/ (with uv's shared cache: seconds once cached), made when
    missing. Returns the version."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    version = version_of(git("show", f"{commit}:{VERSION_FILE}"))
    tree, path = HOME / "releases" / version, VENVS / f"acceleron-{version}"
    stamp = path / ".cloud-stamp"
    digest = hashlib.sha256(f"{commit} {sys.version}".encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return version
    started = time.monotonic()
    for old in (tree, path):
        shutil.rmtree(old, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = tree.with_suffix(".tar")
    git("archive", "--format=tar", "-o", str(archive), commit)
    with tarfile.open(archive) as files:
        files.extractall(tree, filter="data")
    archive.unlink()
    run([uv(), "venv", "-q", "--python", sys.executable, str(path)])
    python = str(path / "bin" / "python")
    lock = str(tree / "requirements.lock")
    run([uv(), "pip", "install", "-q", "--python", python, "-c", lock, str(tree)],
        what=f"installing Acceleron {version}")  # fmt: skip
    stamp.write_text(digest)
    log(f"Acceleron {version} ({commit[:12]}): installed in {time.monotonic() - started:.1f} s")
    return version


def acceleron_command(cloud: Cloud) -> str:
    """The ``acceleron`` command Acceleron's processes start with: the release's (`up
    --release`) or the checkout's."""
    if cloud.release:
        return str(VENVS / f"acceleron-{cloud.release}" / "bin" / "acceleron")
    return str(REPO / ".venv" / "bin" / "acceleron")


def manage(*argv: str) -> subprocess.CompletedProcess[str]:
    """The checkout's ``acceleron`` with the API replicas' configuration (``db upgrade
    --expand``, ``status upgrade check``, ...), run to its end; its exit status is the
    caller's to read."""
    config = str(RUN / "acceleron" / "acceleron.conf")
    command = [str(REPO / ".venv" / "bin" / "acceleron"), "--config-file", config, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)


def upgrade(cloud: Cloud, name: str) -> None:
    """Run Acceleron's process ``name`` (``acceleron-api-N``, ``agent-<host>``) on the
    checkout's release, as an operator's rolling upgrade does: a replica is drained at
    the balancer first (no new request; the balancer answers once none is left on it),
    stopped with SIGTERM, started again with the same arguments, waited for until it
    answers, and enabled again; an agent is stopped and started (it resumes its tasks)."""
    process = cloud.processes[name]
    process.argv[0] = str(REPO / ".venv" / "bin" / "acceleron")
    replica = name in cloud.ports
    if replica:
        balancer("drain", cloud, name)
    cloud.stop(name, wait=60)
    cloud.start(name)
    if replica:
        wait_for(name, answers(cloud.url(name)), cloud, [name])
        balancer("enable", cloud, name)
    log(f"{name}: upgraded")


def balancer(action: str, cloud: Cloud, name: str) -> None:
    """``drain`` (answered once no request is left on it) or ``enable`` the replica
    ``name`` at the balancer in front of the replicas."""
    url = f"{cloud.url(cloud.acceleron_port)}/-/{action}/{cloud.ports[name]}"
    request = urllib.request.Request(url, method="POST")
    with urllib.request.urlopen(request, timeout=WAIT * 2) as answer:
        if answer.status != 200:
            raise CloudError(f"the balancer could not {action} {name}: {answer.status}")


# ---------------------------------------------------------------------------------------
# The cloud's description


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


# ---------------------------------------------------------------------------------------
# Configuration files


def credentials(cloud: Cloud, user: str) -> str:
    """keystoneauth's options for a service user, as lines of a config section."""
    return "\n".join(
        [
            "auth_type = password",
            f"auth_url = {cloud.auth_url}",
            f"username = {user}",
            f"password = {cloud.password}",
            "project_name = service",
            "user_domain_name = Default",
            "project_domain_name = Default",
            f"region_name = {REGION}",
        ]
    )


def authtoken(cloud: Cloud, user: str) -> str:
    """[keystone_authtoken] of a service whose tokens are checked by ``user``."""
    return "\n".join(
        [
            f"www_authenticate_uri = {cloud.auth_url}",
            credentials(cloud, user).replace(f"region_name = {REGION}", ""),
            "service_token_roles_required = true",
        ]
    ).strip()


def variables(cloud: Cloud) -> dict[str, str]:
    found = {
        "run": str(RUN),
        "debug": "false",
        "mysql": MYSQL,
        "postgresql": POSTGRESQL,
        "vhost": cloud.vhost,
        "nested": str(cloud.nested).lower(),
        "accelerator_url": cloud.url(cloud.acceleron_port),
        # Beside Cyborg, the agents report to Acceleron's balancer, not to the catalog's
        # accelerator endpoint (Cyborg's until the adoption).
        "agent_endpoint": f"api_endpoint = {cloud.url('acceleron')}" if cloud.cyborg else "",
        "keystone_url": cloud.auth_url,
        "password": cloud.password,
        "barbican_url": cloud.url("barbican"),
        # Barbican's simple crypto plugin's key-encryption key: 32 bytes of this cloud's.
        "barbican_kek": base64.b64encode(
            hashlib.sha256(f"{cloud.tag}:{cloud.password}".encode()).digest()
        ).decode(),
        "signing_ca": cloud.signing_ca,
        "signed_project": cloud.signed_project,
        **{
            f"db_{n}": cloud.database(n)
            for n in ("keystone", "placement", "nova_api", "nova_cell1", "acceleron", "cyborg")
        },
    }
    for user in SERVICE_USERS:
        found[f"credentials_{user.replace('-', '_')}"] = credentials(cloud, user)
        found[f"authtoken_{user.replace('-', '_')}"] = authtoken(cloud, user)
    return found


def render(template: str, target: Path, values: Mapping[str, str]) -> Path:
    text = (CLOUD / "templates" / template).read_text()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(string.Template(text).substitute(values))
    return target


def acceleron_config(cloud: Cloud, limits_endpoint: str) -> Path:
    """The API replicas' configuration; [oslo_limit] endpoint_id is ``limits_endpoint``
    (the accelerator endpoint's id, known once Keystone's catalog is made)."""
    values = {**variables(cloud), "limits_endpoint": limits_endpoint}
    return render("acceleron.conf", RUN / "acceleron" / "acceleron.conf", values)


def write_configs(cloud: Cloud) -> None:
    values = variables(cloud)
    render("keystone.conf", RUN / "keystone" / "keystone.conf", values)
    render("placement.conf", RUN / "placement" / "placement.conf", values)
    render("glance-api.conf", RUN / "glance" / "glance-api.conf", values)
    render("nova.conf", RUN / "nova" / "nova.conf", values)
    render("barbican.conf", RUN / "barbican" / "barbican.conf", values)
    shutil.copy(
        VENVS / "barbican" / "etc" / "barbican" / "barbican-api-paste.ini", RUN / "barbican"
    )
    acceleron_config(cloud, limits_endpoint="")  # for the schema; again once Keystone runs
    if cloud.cyborg:
        render("cyborg.conf", RUN / "cyborg" / "cyborg.conf", values)
        shutil.copy(VENVS / "cyborg" / "etc" / "cyborg" / "api-paste.ini", RUN / "cyborg")
        (RUN / "cyborg" / "locks").mkdir()
    for index, host in enumerate(COMPUTES, 1):
        render(
            "nova-compute.conf",
            RUN / "nova" / f"{host}.conf",
            {**values, "index": str(index), "host": host},
        )
        if cloud.cyborg:
            render(
                "cyborg-agent.conf",
                RUN / "cyborg" / f"cyborg-agent-{host}.conf",
                values | {"host": host},
            )
        render(
            "acceleron-agent.conf",
            RUN / "acceleron" / host / "agent.conf",
            {**values, "host": host},
        )
        inventory = "inventory-cyborg.yaml" if cloud.cyborg else f"inventory-{host}.yaml"
        render(inventory, RUN / "acceleron" / host / "inventory.yaml", values)
    shutil.copy(VENVS / "glance" / "etc" / "glance" / "glance-api-paste.ini", RUN / "glance")
    shutil.copy(VENVS / "nova" / "etc" / "nova" / "api-paste.ini", RUN / "nova")
    computes = [f"nova/{host}/instances" for host in COMPUTES]
    for sub in ("glance/images", "glance/staging", "glance/tasks", "nova/locks", *computes):
        (RUN / sub).mkdir(parents=True, exist_ok=True)


# ---------------------------------------------------------------------------------------
# Backing services: databases, RabbitMQ


def create_databases(cloud: Cloud) -> None:
    import psycopg
    import pymysql

    mysql = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    with mysql.cursor() as cursor:
        for name in cloud.mysql_databases:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    mysql.close()
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as pg:
        pg.execute(f'CREATE DATABASE "{cloud.database("acceleron")}"')


def drop_databases(cloud: Cloud) -> None:
    import psycopg
    import pymysql

    mysql = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    with mysql.cursor() as cursor:
        for name in cloud.mysql_databases:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    mysql.close()
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{cloud.database("acceleron")}" WITH (FORCE)')


def rabbitmq(cloud: Cloud) -> None:
    rabbitmq_vhost(cloud, present=True)


def rabbitmq_vhost(cloud: Cloud, present: bool) -> None:
    if present:
        run(["rabbitmqctl", "-q", "add_vhost", cloud.vhost], what="rabbitmqctl add_vhost")
        run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", cloud.vhost, "guest", ".*", ".*", ".*"],
            what="rabbitmqctl set_permissions",
        )
    else:
        subprocess.run(
            ["rabbitmqctl", "-q", "delete_vhost", cloud.vhost],
            capture_output=True,
            timeout=60,
            check=False,
        )


# ---------------------------------------------------------------------------------------
# Waiting


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


# ---------------------------------------------------------------------------------------
# The services


def wsgi(
    cloud: Cloud, name: str, app: str, env: dict[str, str], port: str = "", *args: str
) -> None:
    """Serve ``app`` from the virtualenv of the service ``name`` on its port (or on the
    port named ``port``); ``args`` are the arguments the application reads."""
    service = name.removesuffix("-api")
    python = str(VENVS / service / "bin" / "python")
    listen = str(cloud.ports[port or service])
    cloud.start(name, [python, str(CLOUD / "wsgi_runner.py"), app, listen, *args], env)


def keystone(cloud: Cloud) -> None:
    manage = [
        str(VENVS / "keystone" / "bin" / "keystone-manage"),
        "--config-file",
        str(RUN / "keystone" / "keystone.conf"),
    ]
    run([*manage, "db_sync"], what="keystone-manage db_sync")
    for setup in ("fernet_setup", "credential_setup"):
        run(
            [*manage, setup, "--keystone-user", "root", "--keystone-group", "root"],
            what=f"keystone-manage {setup}",
        )
    url = cloud.url("keystone")
    run(
        [
            *manage,
            "bootstrap",
            f"--bootstrap-password={cloud.password}",  # it may start with "-"
            "--bootstrap-admin-url",
            url,
            "--bootstrap-public-url",
            url,
            "--bootstrap-internal-url",
            url,
            "--bootstrap-region-id",
            REGION,
        ],
        what="keystone-manage bootstrap",
    )
    wsgi(
        cloud,
        "keystone",
        "keystone.wsgi.api:application",
        {"OS_KEYSTONE_CONFIG_DIR": str(RUN / "keystone")},
    )
    wait_for("Keystone", answers(f"{url}/v3"), cloud, ["keystone"])
    identity(cloud)


def connect(cloud: Cloud, user: str = "admin", project: str = "admin") -> Any:
    import openstack

    return openstack.connect(
        auth_url=cloud.auth_url,
        username=user,
        password=cloud.password,
        project_name=project,
        user_domain_name="Default",
        project_domain_name="Default",
        region_name=REGION,
        load_yaml_config=False,
        load_envvars=False,
    )


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


def identity(cloud: Cloud) -> None:
    """Projects, users and roles, and the catalog."""
    conn = connect(cloud)
    ident = conn.identity
    roles = {r.name: r for r in ident.roles()}
    if "service" not in roles:
        roles["service"] = ident.create_role(name="service")
    domain = ident.find_domain("default")
    projects = {}
    for name in ("service", "demo", "alt", "signed"):
        projects[name] = ident.create_project(name=name, domain_id=domain.id)
    for user, (project, wanted) in USERS.items():
        created = ident.create_user(
            name=user,
            password=cloud.password,
            domain_id=domain.id,
            default_project_id=projects[project].id,
        )
        for role in wanted:
            ident.assign_project_role_to_user(projects[project], created, roles[role])
        if user == "acceleron":  # oslo.limit reads the endpoint and the limits
            ident.assign_system_role_to_user(created, roles["reader"], "all")
    for kind, (name, url) in cloud.endpoints.items():
        service = ident.create_service(name=name, type=kind)
        for interface in ("public", "internal"):
            ident.create_endpoint(
                service_id=service.id, interface=interface, url=url, region_id=REGION
            )
        if kind == "accelerator":
            for resource, default in REGISTERED_LIMITS.items():
                ident.create_registered_limit(
                    service_id=service.id,
                    region_id=REGION,
                    resource_name=resource,
                    default_limit=default,
                )


def limits_endpoint(cloud: Cloud) -> str:
    """The id of the accelerator service's public endpoint: oslo.limit's endpoint_id."""
    conn = connect(cloud)
    (service,) = conn.identity.services(type="accelerator")
    (endpoint,) = conn.identity.endpoints(service_id=service.id, interface="public")
    return str(endpoint.id)


def placement(cloud: Cloud) -> None:
    env = {"OS_PLACEMENT_CONFIG_DIR": str(RUN / "placement")}
    run(
        [
            str(VENVS / "placement" / "bin" / "placement-manage"),
            "--config-file",
            str(RUN / "placement" / "placement.conf"),
            "db",
            "sync",
        ],
        what="placement-manage db sync",
    )
    wsgi(cloud, "placement", "placement.wsgi.api:application", env)
    wait_for("Placement", answers(cloud.url("placement")), cloud, ["placement"])


def glance(cloud: Cloud) -> None:
    config = str(RUN / "glance" / "glance-api.conf")
    run(
        [str(VENVS / "glance" / "bin" / "glance-manage"), "--config-file", config, "db_sync"],
        what="glance-manage db_sync",
    )
    wsgi(
        cloud,
        "glance",
        "glance.wsgi.api:application",
        {"OS_GLANCE_CONFIG_DIR": str(RUN / "glance")},
    )
    wait_for("Glance", answers(cloud.url("glance")), cloud, ["glance"])


def barbican(cloud: Cloud) -> None:
    """Barbican behind Keystone (the catalog's key-manager), its simple crypto plugin
    keeping the secrets in SQLite: where Glance and the agents read the certificates of
    signed bitstreams (docs/bitstreams.md)."""
    database = f"sqlite:///{RUN / 'barbican' / 'barbican.sqlite'}"
    run(
        [str(VENVS / "barbican" / "bin" / "barbican-manage"), "db", "upgrade", "-d", database],
        what="barbican-manage db upgrade",
    )
    # Barbican reads barbican.conf from the default places only (~/ is one).
    wsgi(cloud, "barbican", "barbican_wsgi:application", {"HOME": str(RUN / "barbican")})
    wait_for("Barbican", answers(cloud.url("barbican")), cloud, ["barbican"])


def signing(cloud: Cloud) -> None:
    """A CA for bitstream signers (its certificate and key in run/barbican/), its
    certificate stored in Barbican by the agents' user; the agents trust it, and require
    signed bitstreams for the requests of the project ``signed``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "Reference cloud FPGA CA")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    folder = RUN / "barbican"
    (folder / "signing-ca.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "signing-ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    conn = connect(cloud, "acceleron", "service")
    secret = conn.key_manager.create_secret(
        name="reference-cloud-fpga-ca",
        secret_type="certificate",
        algorithm="RSA",
        # PEM: castellan reads a certificate secret as PEM (Glance and the agents alike).
        payload=base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode(),
        payload_content_type="application/octet-stream",
        payload_content_encoding="base64",
    )
    cloud.signing_ca = str(secret.secret_ref).rsplit("/", 1)[-1]
    cloud.signed_project = str(connect(cloud).identity.find_project("signed").id)
    cloud.save()
    values = variables(cloud)
    for host in COMPUTES:
        render(
            "acceleron-agent.conf", RUN / "acceleron" / host / "agent.conf", values | {"host": host}
        )


def nova_databases(cloud: Cloud) -> None:
    manage = [
        str(VENVS / "nova" / "bin" / "nova-manage"),
        "--config-file",
        str(RUN / "nova" / "nova.conf"),
    ]
    run([*manage, "api_db", "sync"], what="nova-manage api_db sync")
    cell0 = f"{MYSQL}/{cloud.database('nova_cell0')}?charset=utf8mb4"
    run(
        [*manage, "cell_v2", "map_cell0", "--database_connection", cell0],
        what="nova-manage cell_v2 map_cell0",
    )
    run([*manage, "db", "sync"], what="nova-manage db sync")
    run(
        [*manage, "cell_v2", "create_cell", "--name", "cell1"],
        what="nova-manage cell_v2 create_cell",
    )


def nova(cloud: Cloud) -> None:
    bin_dir, config = VENVS / "nova" / "bin", str(RUN / "nova" / "nova.conf")
    wsgi(
        cloud,
        "nova-api",
        "nova.wsgi.osapi_compute:application",
        {"OS_NOVA_CONFIG_DIR": str(RUN / "nova")},
    )
    for service in ("conductor", "scheduler"):
        cloud.start(
            f"nova-{service}", [str(bin_dir / f"nova-{service}"), "--config-file", config], {}
        )
    for host in COMPUTES:
        cloud.start(
            f"nova-{host}",
            [
                str(bin_dir / "nova-compute"),
                "--config-file",
                config,
                "--config-file",
                str(RUN / "nova" / f"{host}.conf"),
            ],
            {},
        )
    wait_for("nova-api", answers(cloud.url("nova")), cloud, ["nova-api"])


def acceleron_schema(cloud: Cloud) -> None:
    """Acceleron's database schema."""
    command = acceleron_command(cloud)
    config = ["--config-file", str(RUN / "acceleron" / "acceleron.conf")]
    run([command, *config, "db", "upgrade"], what="acceleron db upgrade")


def acceleron(cloud: Cloud) -> None:
    """Two API replicas and the balancer in front of them (once Keystone's catalog and
    registered limits are made: their configuration names the accelerator endpoint)."""
    command = acceleron_command(cloud)
    config = ["--config-file", str(acceleron_config(cloud, limits_endpoint(cloud)))]
    replicas = []
    for index in (1, 2):
        name = f"acceleron-api-{index}"
        cloud.start(name, [command, *config, "api", "--port", str(cloud.ports[name])], {})
        replicas.append(str(cloud.ports[name]))
    # In HTTP mode: a replica can be drained before it stops (upgrade()).
    front = ["-m", "cloud.balancer", "--http", str(cloud.ports[cloud.acceleron_port])]
    cloud.start("balancer", [sys.executable, *front, *replicas], {"PYTHONPATH": str(REPO)})
    for index in (1, 2):
        name = f"acceleron-api-{index}"
        wait_for(name, answers(cloud.url(name)), cloud, [name])


def acceleron_beside_cyborg(cloud: Cloud) -> None:
    """Acceleron started in a cloud that runs upstream Cyborg, as an operator does before
    `acceleron adopt cyborg` (docs/adopt-from-cyborg.md): its schema, the API replicas
    behind a balancer of their own port, and an agent per compute whose fake driver sees
    what Cyborg's does (cloud/templates/inventory-cyborg.yaml). The catalog's accelerator
    endpoint stays Cyborg's. Nothing when Acceleron runs already."""
    if not cloud.cyborg:
        raise CloudError("Acceleron already serves this cloud: start one with --cyborg")
    if "acceleron-api-1" in cloud.processes:
        log("Acceleron runs beside Cyborg already")
        return
    acceleron_schema(cloud)
    acceleron(cloud)
    agents(cloud)
    log(f"Acceleron beside Cyborg: {cloud.url('acceleron')}/v2")


def adopt_cyborg(cloud: Cloud, mapping: Path) -> subprocess.CompletedProcess[str]:
    """``acceleron adopt cyborg`` with the trait mapping file ``mapping``, as the operator
    runs it on the API's host (docs/adopt-from-cyborg.md); its exit status and output."""
    database = f"{MYSQL}/{cloud.database('cyborg')}?charset=utf8mb4"
    return subprocess.run(
        [str(REPO / ".venv" / "bin" / "acceleron"), "--config-file",
         str(RUN / "acceleron" / "acceleron.conf"), "adopt", "cyborg", "--database", database,
         "--mapping", str(mapping)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def cyborg_programmed(cloud: Cloud, function: str) -> str:
    """What upstream Cyborg records on a deployable's provider once it has programmed
    ``function`` into it: the trait ``CUSTOM_FPGA_FUNCTION_ID_<DRIVER>_<FUNCTION>``, here on
    every fake device's provider. Cyborg's fake driver cannot program (Cyborg finds no
    FPGA driver named ``fake``), so the trait is set as Cyborg's bind would set it;
    Acceleron's region of the same card holds the function (inventory-cyborg.yaml).
    Returns the trait."""
    trait = f"CUSTOM_FPGA_FUNCTION_ID_FAKE_{function.replace('-', '').upper()}"
    placement = connect(cloud).placement
    version = {"OpenStack-API-Version": "placement 1.14"}
    placement.put(f"/traits/{trait}", headers=version)
    for host in COMPUTES:
        (rp,) = placement.get("/resource_providers", params={"name": f"{host}_FakeDevice"},
                              headers=version).json()["resource_providers"]  # fmt: skip
        held = placement.get(f"/resource_providers/{rp['uuid']}/traits", headers=version).json()
        body = {"traits": sorted({*held["traits"], trait}),
                "resource_provider_generation": held["resource_provider_generation"]}  # fmt: skip
        done = placement.put(f"/resource_providers/{rp['uuid']}/traits", json=body,
                             headers=version)  # fmt: skip
        if done.status_code != 200:
            raise CloudError(f"{trait} on {rp['name']}: {done.status_code} {done.text}")
    return trait


def switch_to_acceleron(cloud: Cloud) -> None:
    """After the adoption (docs/adopt-from-cyborg.md, step 5): the catalog's accelerator
    endpoints point at Acceleron's balancer, Cyborg's services stop, and each nova-compute
    restarts. Nova's compute caches its host's provider tree, Cyborg's providers included,
    and fails every claim (a boot, a heal of its resources) on a provider of the cache that
    the adoption deleted, until it reads the tree again: at its start."""
    admin = connect(cloud)
    (service,) = admin.identity.services(type="accelerator")
    for endpoint in admin.identity.endpoints(service_id=service.id):
        admin.identity.update_endpoint(endpoint, url=f"{cloud.url('acceleron')}/v2")
    for name in [n for n in cloud.processes if n.startswith("cyborg-")]:
        cloud.stop(name)
    for host in COMPUTES:
        restart(cloud, f"nova-{host}")  # the old process has gone: no report of its own
        since = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        wait_for(f"nova-compute of {host} back", compute_reports(admin, host, since), cloud,
                 [f"nova-{host}"])  # fmt: skip
    log(f"the accelerator endpoint is Acceleron's now: {cloud.url('acceleron')}/v2")


def compute_reports(admin: Any, host: str, since: dt.datetime) -> Callable[[], bool]:
    """Whether the nova-compute of ``host`` has reported its state since ``since`` (UTC):
    a compute started reports only once it has looked at its resources and Placement
    (a compute still stopping reports too: take ``since`` once it has gone)."""

    def check() -> bool:
        (found,) = admin.compute.services(binary="nova-compute", host=host)
        updated = dt.datetime.fromisoformat(str(found.updated_at)).replace(tzinfo=None)
        return bool(found.state == "up" and updated > since)

    return check


def neutron(cloud: Cloud) -> None:
    cloud.start(
        "neutron-standin",
        [sys.executable, "-m", "cloud.neutron_standin", str(cloud.ports["neutron"])],
        {"PYTHONPATH": str(REPO)},
    )
    wait_for("the Neutron stand-in", answers(cloud.url("neutron")), cloud, ["neutron-standin"])


def computes_in_placement(cloud: Cloud) -> None:
    """Wait for both compute nodes in Placement, then map them into the cell."""
    conn = connect(cloud)

    def both() -> bool:
        names = {rp.name for rp in conn.placement.resource_providers()}
        return set(COMPUTES) <= names

    wait_for(
        "the compute nodes in Placement",
        both,
        cloud,
        [f"nova-{h}" for h in COMPUTES] + ["nova-conductor"],
    )
    run(
        [
            str(VENVS / "nova" / "bin" / "nova-manage"),
            "--config-file",
            str(RUN / "nova" / "nova.conf"),
            "cell_v2",
            "discover_hosts",
        ],
        what="nova-manage cell_v2 discover_hosts",
    )


def cyborg_schema(cloud: Cloud) -> None:
    """Upstream Cyborg's database schema, made by Cyborg itself."""
    config = str(RUN / "cyborg" / "cyborg.conf")
    run(
        [str(VENVS / "cyborg" / "bin" / "cyborg-dbsync"), "--config-file", config, "upgrade"],
        what="cyborg-dbsync upgrade",
    )


def cyborg(cloud: Cloud) -> None:
    """Upstream Cyborg's API (its WSGI application, on the accelerator port) and its
    conductor, in place of Acceleron's replicas."""
    config = str(RUN / "cyborg" / "cyborg.conf")
    wsgi(
        cloud,
        "cyborg-api",
        "cyborg.wsgi.api:application",
        {},
        "accelerator",
        "--config-file",
        config,
    )
    conductor = str(VENVS / "cyborg" / "bin" / "cyborg-conductor")
    cloud.start("cyborg-conductor", [conductor, "--config-file", config], {})
    wait_for("cyborg-api", answers(cloud.url("accelerator")), cloud, ["cyborg-api"])


def cyborg_agents(cloud: Cloud) -> None:
    """A cyborg-agent per compute (once the compute nodes are in Placement: an agent
    looks its host's provider up when it starts), one after the other: each waits until
    its host's fake device is in Cyborg and, with its inventory and trait, in Placement.
    Two first reports at once race in Cyborg's conductor (the second to create the trait
    CUSTOM_FAKE_DEVICE takes Placement's 204 for a failure and drops that host's device
    until the agent's next periodic report, a minute later)."""
    agent = str(VENVS / "cyborg" / "bin" / "cyborg-agent")
    conn = connect(cloud)
    for host in COMPUTES:
        configs = [RUN / "cyborg" / "cyborg.conf", RUN / "cyborg" / f"cyborg-agent-{host}.conf"]
        argv = [agent, *(a for c in configs for a in ("--config-file", str(c)))]
        cloud.start(f"cyborg-agent-{host}", argv, {})
        wait_for(
            f"{host}'s fake device in Cyborg and Placement",
            cyborg_device_published(conn, f"{host}_FakeDevice"),
            cloud,
            [f"cyborg-agent-{host}", "cyborg-conductor", "cyborg-api"],
        )


def cyborg_device_published(conn: Any, name: str) -> Callable[[], bool]:
    """Whether Cyborg lists the deployable ``name`` and its provider in Placement has
    its inventory and its trait (the conductor writes its database first, then the
    provider, its inventory, then its traits)."""
    version = {"OpenStack-API-Version": "placement 1.14"}

    def check() -> bool:
        listed = conn.accelerator.get("/deployables").json()["deployables"]
        if name not in {d["name"] for d in listed}:
            return False
        found = conn.placement.get(
            "/resource_providers", params={"name": name}, headers=version
        ).json()["resource_providers"]
        if not found:
            return False
        path = f"/resource_providers/{found[0]['uuid']}"
        inventory = conn.placement.get(f"{path}/inventories", headers=version).json()
        traits = conn.placement.get(f"{path}/traits", headers=version).json()
        return "FPGA" in inventory["inventories"] and "CUSTOM_FAKE_DEVICE" in traits["traits"]

    return check


def agents(cloud: Cloud) -> None:
    """One agent per compute host; wait until each host's accelerators are in Placement
    (child providers, or the compute node's own inventory in a flat cloud)."""
    command = acceleron_command(cloud)
    for host in COMPUTES:
        cloud.start(
            f"agent-{host}",
            [command, "--config-file", str(RUN / "acceleron" / host / "agent.conf"), "agent"],
            {},
        )
    conn = connect(cloud)

    def published() -> bool:
        roots = {rp.name: rp.id for rp in conn.placement.resource_providers()}
        for host in COMPUTES:
            if cloud.nested:
                # The compute node and Acceleron's card and region (and Cyborg's device).
                tree = list(conn.placement.resource_providers(in_tree=roots[host]))
                if len(tree) < (4 if cloud.cyborg else 2):
                    return False
            else:
                # Flat: the classes land on the compute node itself (spec 001's fallback).
                inventory = conn.placement.get(
                    f"/resource_providers/{roots[host]}/inventories",
                    headers={"OpenStack-API-Version": "placement 1.14"},
                ).json()["inventories"]
                if not any(rc.startswith("CUSTOM_ACCELERATOR_") for rc in inventory):
                    return False
        return True

    wait_for(
        "the accelerators in Placement",
        published,
        cloud,
        [f"agent-{h}" for h in COMPUTES] + ["acceleron-api-1", "acceleron-api-2"],
    )


# ---------------------------------------------------------------------------------------
# Credentials for users and scripts


def write_credentials(cloud: Cloud) -> None:
    """run/clouds.yaml (clouds acceleron-admin, -member, -alt-member, -reader,
    -signer, -service) and run/env/<user>.sh with the same as OS_* variables."""
    users = {
        "admin": "admin",
        "member": "demo",
        "alt-member": "alt",
        "signer": "signed",
        "reader": "demo",
        "service": "service",
    }
    (RUN / "env").mkdir(exist_ok=True)
    clouds: dict[str, Any] = {}
    for label, project in users.items():
        user = "acceleron" if label == "service" else label
        auth = {
            "auth_url": cloud.auth_url,
            "username": user,
            "password": cloud.password,
            "project_name": project,
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        }
        clouds[f"acceleron-{label}"] = {
            "auth": auth,
            "region_name": REGION,
            "identity_api_version": "3",
        }
        lines = [f"export OS_{k.upper()}={v}" for k, v in auth.items()]
        lines += [
            f"export OS_REGION_NAME={REGION}",
            "export OS_IDENTITY_API_VERSION=3",
            "unset OS_CLOUD",
        ]
        (RUN / "env" / f"{label}.sh").write_text("\n".join(lines) + "\n")
    if cloud.cyborg:
        # Upstream Cyborg reads a bitstream's image from Glance, when a profile asks for
        # programming at bind, as the cloud `devstack-admin` of a clouds.yaml (its
        # processes run in RUN, one of the places openstacksdk looks).
        clouds["devstack-admin"] = clouds["acceleron-admin"]
    import yaml

    (RUN / "clouds.yaml").write_text(yaml.safe_dump({"clouds": clouds}, sort_keys=False))


# ---------------------------------------------------------------------------------------
# Up and down


def up(nested: bool = True, accelerator: str = ACCELERON, release: str = "") -> Cloud:
    """Start the cloud, with Acceleron or upstream Cyborg (``accelerator``) as its
    accelerator service; Acceleron at the release ``release`` (a commit or tag) rather
    than the checkout's, when given."""
    existing = Cloud.load()
    if existing is not None and existing.running:
        log(f"already running (state in {STATE}); `make cloud-stop` first to start anew")
        return existing
    started = time.monotonic()
    for name in (*SERVICES, CYBORG) if accelerator == CYBORG else SERVICES:
        venv(name)
    version = release_venv(release) if release else ""
    log(f"virtualenvs ready in {time.monotonic() - started:.1f} s")
    shutil.rmtree(RUN, ignore_errors=True)
    LOGS.mkdir(parents=True)
    names = [
        "keystone",
        "placement",
        "glance",
        "nova",
        "neutron",
        "accelerator",
        "acceleron",
        "acceleron-api-1",
        "acceleron-api-2",
        "barbican",
    ]
    cloud = Cloud(
        secrets.token_hex(3),
        secrets.token_urlsafe(12),
        free_ports(names),
        nested,
        accelerator=accelerator,
        release=version,
    )
    cloud.save()
    try:
        write_configs(cloud)
        create_databases(cloud)
        steps: list[Callable[[Cloud], None]] = [
            keystone,
            placement,
            glance,
            barbican,
            nova_databases,
            cyborg_schema if cloud.cyborg else acceleron_schema,
            neutron,
            rabbitmq,
        ]
        in_parallel(cloud, steps)
        log(f"Keystone, Placement, Glance, Barbican up in {time.monotonic() - started:.1f} s")
        timed(signing, cloud)
        nova(cloud)
        if cloud.cyborg:
            cyborg(cloud)
            computes_in_placement(cloud)
            cyborg_agents(cloud)
        else:
            acceleron(cloud)
            computes_in_placement(cloud)
            agents(cloud)
        write_credentials(cloud)
    except BaseException:
        log(f"start failed; stopping what was started (logs stay in {LOGS})")
        down(cloud)
        raise
    log(f"up in {time.monotonic() - started:.1f} s")
    summary(cloud)
    return cloud


def in_parallel(cloud: Cloud, steps: Sequence[Callable[[Cloud], None]]) -> None:
    """Run the steps side by side; the first failure is raised as soon as it happens."""
    pool = concurrent.futures.ThreadPoolExecutor(len(steps))
    futures = [pool.submit(timed, step, cloud) for step in steps]
    done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    pool.shutdown(wait=False)
    for future in done:
        future.result()
    for future in futures:
        future.result()


def timed(step: Callable[[Cloud], None], cloud: Cloud) -> None:
    started = time.monotonic()
    step(cloud)
    log(f"{getattr(step, '__name__', 'step')}: done in {time.monotonic() - started:.1f} s")


def down(cloud: Cloud | None = None) -> None:
    cloud = cloud or Cloud.load()
    if cloud is None:
        log("no cloud to stop")
        return
    started = time.monotonic()
    cloud.stop_all()
    drop_databases(cloud)
    rabbitmq_vhost(cloud, present=False)
    cloud.processes.clear()
    cloud.save()
    log(f"stopped in {time.monotonic() - started:.1f} s (logs kept in {LOGS})")


def restart(cloud: Cloud, name: str) -> None:
    """Stop and start one process; a server is waited for until it answers."""
    cloud.stop(name)
    cloud.start(name)
    port = {"nova-api": "nova", "neutron-standin": "neutron", "balancer": "accelerator"}
    service = port.get(name, name)
    if service in cloud.ports:
        wait_for(name, answers(cloud.url(service)), cloud, [name])


def to_nested(cloud: Cloud) -> None:
    """What an operator does before ``acceleron placement migrate-to-nested`` (spec 001's
    upgrade): ``[placement] nested = true`` in the API's configuration, then both API
    replicas restarted. The compute nodes keep their flat inventory until the migration."""
    cloud.nested = True
    cloud.save()
    acceleron_config(cloud, limits_endpoint(cloud))
    for index in (1, 2):
        restart(cloud, f"acceleron-api-{index}")


def end_to_end(
    pytest_args: Sequence[str],
    nested: bool = True,
    accelerator: str = ACCELERON,
    upgrade: bool = False,
) -> int:
    """Run tests/e2e against the running cloud, or against one started for the run and
    stopped after it (flat when ``nested`` is false, with upstream Cyborg when
    ``accelerator`` says so: then only tests/e2e/test_cyborg.py runs; on the previous
    release when ``upgrade`` says so: then only tests/e2e/test_upgrade.py runs)."""
    existing = Cloud.load()
    ours = existing is None or not existing.running
    started = time.monotonic()
    if ours:
        release = previous_release() if upgrade else ""
        up(nested=nested, accelerator=accelerator, release=release)
    found = Cloud.load()
    cyborg_runs = found is not None and found.cyborg
    tests = "tests/e2e/test_cyborg.py" if cyborg_runs else "tests/e2e"
    if found is not None and found.release:  # its tallies are printed as it goes
        tests, pytest_args = "tests/e2e/test_upgrade.py", ["-s", *pytest_args]
    env = {**os.environ, "ACCELERON_E2E": "1", "OS_CLIENT_CONFIG_FILE": str(RUN / "clouds.yaml")}
    try:
        argv = [
            str(REPO / ".venv" / "bin" / "pytest"),
            tests,
            "--timeout",
            "900",
            "--durations=15",  # where CI's time goes
            *pytest_args,
        ]
        code = subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
    finally:
        if ours:
            down()
    log(f"end-to-end run: {time.monotonic() - started:.0f} s in all (exit status {code})")
    return code


def summary(cloud: Cloud) -> None:
    print(f"  Keystone     {cloud.auth_url}  (admin / {cloud.password})")
    for kind, (name, url) in cloud.endpoints.items():
        print(f"  {kind:<12} {url}  ({name})")
    agent = "a cyborg-agent" if cloud.cyborg else "an Acceleron agent"
    print(f"  computes     {', '.join(COMPUTES)} (fake driver), {agent} on each")
    print(f"  logs         {LOGS}")
    print(f"  credentials  {RUN / 'clouds.yaml'} (OS_CLIENT_CONFIG_FILE), {RUN / 'env'}/*.sh")
    print(f"Try: source {RUN / 'env' / 'admin.sh'} && openstack accelerator device list")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cloud", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="bring the cloud up (nothing if it runs)")
    start.add_argument(
        "--flat",
        action="store_true",
        help="Acceleron publishes flat providers ([placement] nested = false)",
    )
    start.add_argument(
        "--cyborg",
        action="store_true",
        help="upstream Cyborg (API, conductor, an agent per compute with its fake driver) "
        "is the accelerator service instead of Acceleron",
    )
    start.add_argument(
        "--release",
        nargs="?",
        const="previous",
        default="",
        metavar="COMMIT",
        help="Acceleron at this release (a commit or tag; alone: the release before the "
        "checkout's), installed from its own lock, to upgrade from (make e2e-upgrade)",
    )
    sub.add_parser("down", help="stop every process, drop the databases and the vhost")
    sub.add_parser(
        "acceleron",
        help="in a cloud started with --cyborg: start Acceleron's API and agents beside "
        "Cyborg (what `acceleron adopt cyborg` needs); the catalog stays Cyborg's",
    )
    sub.add_parser("venvs", help="make the virtualenvs only")
    e2e = sub.add_parser("e2e", help="run tests/e2e against the cloud (started if need be)")
    e2e.add_argument(
        "--flat",
        action="store_true",
        help="a cloud started for the run is flat (only tests/e2e/test_flat.py then runs)",
    )
    e2e.add_argument(
        "--cyborg",
        action="store_true",
        help="a cloud started for the run has upstream Cyborg (tests/e2e/test_cyborg.py runs)",
    )
    e2e.add_argument(
        "--upgrade",
        action="store_true",
        help="a cloud started for the run has Acceleron's previous release, upgraded under "
        "load by tests/e2e/test_upgrade.py (the only test that runs)",
    )
    e2e.add_argument("pytest_args", nargs="*", help="more pytest arguments")
    sub.add_parser(
        "nested",
        help="set [placement] nested = true and restart the API replicas (a flat cloud's "
        "first step towards migrate-to-nested)",
    )
    again = sub.add_parser("restart", help="start a process of the cloud again")
    again.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            release = previous_release() if args.release == "previous" else args.release
            accelerator = CYBORG if args.cyborg else ACCELERON
            up(nested=not args.flat, accelerator=accelerator, release=release)
        elif args.command == "down":
            down()
        elif args.command == "acceleron":
            cloud = Cloud.load()
            if cloud is None or not cloud.running:
                raise CloudError("no cloud runs")
            acceleron_beside_cyborg(cloud)
        elif args.command == "e2e":
            accelerator = CYBORG if args.cyborg else ACCELERON
            return end_to_end(
                args.pytest_args,
                nested=not args.flat,
                accelerator=accelerator,
                upgrade=args.upgrade,
            )
        elif args.command == "venvs":
            for name in SERVICES:
                venv(name)
        elif args.command == "nested":
            cloud = Cloud.load()
            if cloud is None or not cloud.running:
                raise CloudError("no cloud runs")
            to_nested(cloud)
        else:
            cloud = Cloud.load()
            if cloud is None or args.name not in cloud.processes:
                raise CloudError(f"no process {args.name!r} in {STATE}")
            restart(cloud, args.name)
    except CloudError as error:
        print(f"cloud: {error}", file=sys.stderr)
        return 1
    return 0
