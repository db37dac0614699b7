"""8-accelerator hosts in Placement: provider shapes and Placement's options, side by side.

Issue 41: an HGX-class host (8 whole GPUs, 0-3 on NUMA node 0, 4-7 on node 1) published
with one provider per GPU makes Nova's query for N groups of one explode (placement bug
2126751), and one group of N fails (no provider has more than one). This script
measures the candidate designs against the real Placement (openstack-placement 16, as
the all-in-one runs it: its WSGI application, here under uvicorn in a process of its
own, one per design, so that a request can be given up on and its CPU time counted).

Three kinds of host, each 8 devices (the fake driver's inventory, published as
``placement.tree`` renders it today; ``--hosts`` of each kind):

* ``gpu``: 8 whole H200s (class ``CUSTOM_ACCELERATOR_GPU`` and their HBM);
* ``mig``: 8 H200s in MIG mode, each a ``1g.18gb`` profile of 7 slices
  (``CUSTOM_ACCELERATOR_MIG``, the slices' memory beside them);
* ``fpga``: 8 FPGA cards of one region each.

The shapes (each in a Placement database of its own):

* ``per-device``: today's tree, one provider per GPU, MIG profile or region;
* ``pool-host``: the identical devices of a host (same classes and amounts, same
  traits) as one provider under the compute node, their inventories summed and
  ``max_unit`` the whole (Acceleron would pick the devices at bind);
* ``pool-numa``: one such provider per NUMA node (devices 0-3, 4-7);
* ``pool-switch``: one per PCIe switch (devices 0-1, 2-3, 4-5, 6-7);
* ``product``: what Acceleron publishes now, ``placement.tree`` with ``[placement]
  pools`` on (``--designs product``), in the embedded Placement's options (``[placement]
  embedded_*``: the cap of 100, breadth-first, the wide-tree workaround);
  ``product-untuned`` the same tree in Placement's defaults.

The designs: a shape, and Placement's options (``[workarounds]
optimize_for_wide_provider_trees``, ``[placement] max_allocation_candidates`` and
``allocation_candidates_generation_strategy``; set through oslo.config's environment
variables, ``OS_<GROUP>__<OPTION>``). For each design, host count and request shape:

* **Nova**: ``GET /allocation_candidates`` as Nova 34 sends it for a flavor of 2 vCPU,
  512 MB, 1 GB with the device profile (microversion 1.36, ``limit=1000``, the flavor's
  resources unsuffixed, one numbered group ``device_profile_<i>`` per profile group,
  ``group_policy=none``, ``root_required=COMPUTE_ACCELERATORS,!COMPUTE_STATUS_DISABLED``);
* **claim**: what a server-side claim asks Placement when Acceleron's own view cannot
  choose (``claim_allocation.candidate_queries``: ``limit=20``, every group ``in_tree`` one
  host's compute node, at Acceleron's microversion), on a host drawn at random;
* once per shape, **view**: the claim's own choice among the providers of the two
  hosts its survey draws (``claim_view.View.candidates``), without Placement.

Each timed request is a fresh query with a client timeout (``--timeout``): one that
does not answer is reported ``> T s`` and its server is killed and started again. A
request shape that did not answer at 1 host is not asked at more. Beside the wall time
of each request, the CPU time Placement's process spent on it (``/proc``; on
PostgreSQL the database server's own is not counted), the number of allocation
requests answered, and, as a baseline measured in the same run by every server, a
small ``GET /resource_providers?in_tree=`` of one host. Unless ``--designs`` says
otherwise, today's shape, today's with Placement's options that answer it best, and
``pool-host`` (about 6 minutes on 2 cores, 2 of them building the databases: ``--keep``
builds them once); ``--designs all`` measures every one (20 minutes).

    .venv/bin/python bench/gpu_hosts.py [--hosts 1,100] [--timeout 5]
        [--database sqlite|URL] [--designs NAME,...|all] [--samples 10] [--budget 3]
        [--keep DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import multiprocessing
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from acceleron.placement.client import Inventory
from acceleron.scheduler.query import split_regions
from load import cpu_seconds, free_port, wait_ready
from scale import PLACEMENT_DB_ENV

NAMESPACE = uuid.UUID("7d0c3c52-0f0e-4a52-9a43-5e9b1f2a4141")
# The fake driver's inventory of each kind of host: 8 devices (a pool's unit goes by
# the device's rank, ``UNITS``).
INVENTORIES = {
    "gpu": """
devices:
  - {type: GPU, count: 4, product_id: "2335", model: H200, numa_node: 0,
     memory_mb: 143771, memory_type: HBM3e}
  - {type: GPU, count: 4, product_id: "2335", model: H200, numa_node: 1,
     memory_mb: 143771, memory_type: HBM3e}
""",
    "mig": """
devices:
  - {type: GPU, count: 4, product_id: "2335", model: H200, numa_node: 0,
     memory_mb: 143771, memory_type: HBM3e,
     mig_profiles: [{name: 1g.18gb, instances: 7, memory_mb: 16384}]}
  - {type: GPU, count: 4, product_id: "2335", model: H200, numa_node: 1,
     memory_mb: 143771, memory_type: HBM3e,
     mig_profiles: [{name: 1g.18gb, instances: 7, memory_mb: 16384}]}
""",
    "fpga": """
devices:
  - {type: FPGA, count: 8, product_id: "09c4", model: PAC_ARRIA10, regions: [
      {region_type: ce48969398f05f33946d560708be108a, accelerators: 1,
       functions: [d8424dc4a4a3c413f89e433683f9040b]}]}
""",
}
# The compute node as Nova reports it, and the flavor's own resources.
COMPUTE_INVENTORY = {
    "VCPU": Inventory(total=224, allocation_ratio=4.0),
    "MEMORY_MB": Inventory(total=2_064_000),
    "DISK_GB": Inventory(total=30_000),
}
COMPUTE_TRAITS = frozenset({"COMPUTE_ACCELERATORS"})
FLAVOR = {"VCPU": 2, "MEMORY_MB": 512, "DISK_GB": 1}
NOVA_MICROVERSION = "1.36"  # nova.scheduler.client.report.SAME_SUBTREE_VERSION
NOVA_ROOT_REQUIRED = "COMPUTE_ACCELERATORS,!COMPUTE_STATUS_DISABLED"
NOVA_LIMIT = 1000  # [scheduler] max_placement_results


# --- the shapes -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Spec:
    """One provider of a host's tree, whatever the host: ``key`` its name after the
    host's (``<host>_<key>``), ``parent`` its parent's key (None: the compute node),
    ``device`` the index of the device it stands for (None: several)."""

    key: str
    parent: str | None
    inventories: Mapping[str, Inventory]
    traits: frozenset[str]
    device: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "parent": self.parent,
            "inventories": {rc: inv.to_json() for rc, inv in self.inventories.items()},
            "traits": sorted(self.traits),
            "device": self.device,
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Spec:
        inventories = {rc: Inventory.from_json(inv) for rc, inv in body["inventories"].items()}
        return cls(
            body["key"], body["parent"], inventories, frozenset(body["traits"]), body["device"]
        )


def templates(work: Path, pools: bool = False) -> dict[str, list[Spec]]:
    """Each kind's tree as ``placement.tree`` renders it (``pools``: with ``[placement]
    pools`` on, what Acceleron publishes now), from the fake driver's report of a host
    reconciled into a database of Acceleron's own."""
    from sqlalchemy import select

    from acceleron import conf as confmod
    from acceleron.db import migrate
    from acceleron.db.models import Deployable, Device, table
    from acceleron.db.session import Database
    from acceleron.drivers.fake import FakeDriver
    from acceleron.placement import tree
    from acceleron.report import HostReport
    from acceleron.service import inventory

    db = Database(f"sqlite:///{work / ('acceleron-pools.sqlite' if pools else 'acceleron.sqlite')}")
    migrate.upgrade(db)
    devices_t, deployables_t = table(Device), table(Deployable)
    found = {}
    for kind, text in INVENTORIES.items():
        (work / f"{kind}.yaml").write_text(text)
        conf = confmod.load(
            [],
            config_files=[],
            overrides={
                "DEFAULT": {"state_path": str(work), "host": kind},
                "fake": {"inventory_file": str(work / f"{kind}.yaml")},
            },
        )
        inventory.reconcile(db, HostReport(kind, "bench", tuple(FakeDriver(conf, work).discover())))
        with db.reader() as conn:
            devices = conn.execute(select(devices_t).where(devices_t.c.hostname == kind)).all()
            ids = [d.id for d in devices]
            deployables = conn.execute(
                select(deployables_t).where(deployables_t.c.device_id.in_(ids))
            ).all()
        options = tree.Options(pools=pools)
        desired = tree.desired_tree(kind, "compute", devices, deployables, options)
        found[kind] = _specs(kind, desired)
    db.dispose()
    return found


def _specs(host: str, desired: Sequence[Any]) -> list[Spec]:
    """``desired_tree``'s providers as host-independent specs; a device's index is its
    rank by PCI address (the address is the start of its providers' names)."""
    keys = {p.uuid: p.name.removeprefix(f"{host}_") for p in desired}
    addresses = sorted(
        {k.split("_", 1)[0] for p, k in zip(desired, keys.values(), strict=True) if not p.members}
    )
    return [
        Spec(
            keys[p.uuid],
            keys.get(p.parent_uuid),
            dict(p.inventories),
            p.traits,
            None if p.members else addresses.index(keys[p.uuid].split("_", 1)[0]),
        )
        for p in desired
    ]


# The unit a pooled provider stands for, by device index: the HGX layout (GPUs 0-3 on
# NUMA node 0, a PCIe switch to every two).
UNITS: dict[str, Callable[[int], str]] = {
    "host": lambda device: "host",
    "numa": lambda device: f"numa{device // 4}",
    "switch": lambda device: f"switch{device // 2}",
}


def pooled(specs: Sequence[Spec], unit: Callable[[int], str]) -> list[Spec]:
    """Identical providers with inventory (same classes and amounts, same traits) of one
    unit merged into one provider under the compute node: totals summed, ``max_unit``
    the whole. Providers left without inventory below them (a card whose only child was
    pooled) go too."""
    groups: dict[tuple[Any, ...], list[Spec]] = {}
    for spec in specs:
        if spec.inventories and spec.device is not None:
            alike = (unit(spec.device), spec.traits, tuple(sorted(spec.inventories.items())))
            groups.setdefault(alike, []).append(spec)
    pools = [
        _merged(f"pool_{alike[0]}_{n}", members)
        for n, (alike, members) in enumerate(sorted(groups.items(), key=str))
    ]
    merged = {spec.key for members in groups.values() for spec in members}
    needed = {spec.parent for spec in specs if spec.key not in merged}
    kept = [s for s in specs if s.key not in merged and (s.inventories or s.key in needed)]
    return kept + pools


def _merged(key: str, members: Sequence[Spec]) -> Spec:
    inventories = {}
    for rc in members[0].inventories:
        total = sum(m.inventories[rc].total for m in members)
        reserved = sum(m.inventories[rc].reserved for m in members)
        inventories[rc] = Inventory(total=total, reserved=reserved, max_unit=total)
    return Spec(key, None, inventories, members[0].traits)


def shapes(work: Path) -> dict[str, dict[str, list[Spec]]]:
    """Every shape's tree of each kind of host."""
    today = templates(work)
    found = {"per-device": today, "product": templates(work, pools=True)}
    for name, unit in UNITS.items():
        found[f"pool-{name}"] = {kind: pooled(specs, unit) for kind, specs in today.items()}
    return found


def hostname(kind: str, n: int) -> str:
    return f"{kind}-{n:04d}"


def provider_uuid(host: str, key: str | None = None) -> str:
    """The compute node's uuid (``key`` None) or that of the host's provider ``key``."""
    return str(uuid.uuid5(NAMESPACE, host if key is None else f"{host}/{key}"))


# --- building a shape's database ----------------------------------------------------------


def publish(client: Any, trees: Mapping[str, Sequence[Spec]], count: int) -> int:
    """``count`` hosts of each kind: a compute node as Nova
    makes it, and the kind's tree under it, written as the sync writes a new provider
    (create, inventories, traits). The number of providers."""
    every = [spec for specs in trees.values() for spec in specs]
    client.ensure_resource_classes(rc for spec in every for rc in spec.inventories)
    client.ensure_traits(trait for spec in every for trait in spec.traits)
    made = 0
    for kind, specs in trees.items():
        for n in range(count):
            host = hostname(kind, n)
            root = provider_uuid(host)
            client.create_provider(root, host)
            client.set_inventories(root, COMPUTE_INVENTORY)
            client.set_traits(root, COMPUTE_TRAITS)
            for spec in specs:
                rp = provider_uuid(host, spec.key)
                parent = root if spec.parent is None else provider_uuid(host, spec.parent)
                client.create_provider(rp, f"{host}_{spec.key}", parent)
                if spec.inventories:
                    client.set_inventories(rp, spec.inventories)
                client.set_traits(rp, spec.traits)
            made += 1 + len(specs)
    return made


def build(args: argparse.Namespace) -> None:
    """``--build``: one shape's hosts into the Placement database ``--db``, through
    Placement in this process (the subprocess's: one database a process)."""
    from sqlalchemy import text

    from acceleron.placement import inprocess
    from acceleron.placement.client import PlacementClient

    trees = {
        kind: [Spec.from_json(s) for s in specs]
        for kind, specs in json.loads(Path(args.specs).read_text()).items()
    }
    app = inprocess.placement_app(args.db, inprocess.PLACEMENT_DEFAULTS)
    started = time.perf_counter()
    made = publish(PlacementClient(inprocess.direct_adapter(app)), trees, args.count)
    engine = inprocess.placement_engine()
    if args.db.startswith("sqlite"):
        with engine.connect() as conn:  # the server that opens it next finds no log
            conn.execute(text("PRAGMA wal_checkpoint(TRUNCATE)"))
    engine.dispose()
    print(json.dumps({"providers": made, "seconds": time.perf_counter() - started}))


def built(
    work: Path,
    args: argparse.Namespace,
    shape: str,
    trees: Mapping[str, Sequence[Spec]],
    hosts: int,
    log: Path,
) -> tuple[str, float | None]:
    """A Placement database with ``hosts`` hosts of each kind in ``shape``; its URL and
    the seconds the build took. With ``--keep`` (SQLite), one built before for the same
    trees and Placement's version is used again (None: no build)."""
    from importlib.metadata import version

    text = json.dumps({k: [s.to_json() for s in v] for k, v in trees.items()}, sort_keys=True)
    digest = hashlib.sha256(f"{version('openstack-placement')} {text}".encode()).hexdigest()
    name = f"gpu_hosts_{shape.replace('-', '_')}_{hosts}"
    if args.database != "sqlite":
        url = _pg_url(args.database, name)
    else:
        where = Path(args.keep) if args.keep else work
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{name}_{digest[:12]}.sqlite"
        url = f"sqlite:///{path}"
        if args.keep and path.exists():
            return url, None
    specs = work / f"{shape}.json"
    specs.write_text(text)
    argv = [sys.executable, __file__, "--build", "--db", url, "--specs", str(specs)]
    with open(log, "a") as out:
        answer = subprocess.run(
            [*argv, "--count", str(hosts)],
            stdout=subprocess.PIPE,
            stderr=out,
            check=True,
            text=True,
        )
    return url, float(json.loads(answer.stdout.splitlines()[-1])["seconds"])


def _pg_url(server: str, name: str) -> str:
    """A fresh database ``name`` on the PostgreSQL server of ``server`` (a URL)."""
    from sqlalchemy import create_engine
    from sqlalchemy import text as sql
    from sqlalchemy.engine import make_url

    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(sql(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    # Placement's PostgreSQL driver is psycopg2 (the bench extra).
    url = make_url(server).set(database=name, drivername="postgresql+psycopg2")
    return url.render_as_string(hide_password=False)


def drop_pg(server: str, urls: Sequence[str]) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy import text as sql
    from sqlalchemy.engine import make_url

    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        for url in urls:
            name = make_url(url).database
            conn.execute(sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# --- designs and the Placement server ------------------------------------------------------

WIDE = {"OS_WORKAROUNDS__OPTIMIZE_FOR_WIDE_PROVIDER_TREES": "true"}
BREADTH = {"OS_PLACEMENT__ALLOCATION_CANDIDATES_GENERATION_STRATEGY": "breadth-first"}


def most(n: int) -> dict[str, str]:
    return {"OS_PLACEMENT__MAX_ALLOCATION_CANDIDATES": str(n)}


@dataclasses.dataclass(frozen=True)
class Design:
    name: str
    shape: str
    options: Mapping[str, str]  # Placement's options, as oslo.config's variables


DESIGNS = [
    Design("per-device", "per-device", {}),
    Design("per-device +wide", "per-device", WIDE),
    Design("per-device +max1000", "per-device", most(1000)),
    Design("per-device +max100 +bf", "per-device", most(100) | BREADTH),
    Design("per-device +wide +max1000 +bf", "per-device", WIDE | most(1000) | BREADTH),
    Design("per-device +wide +max100 +bf", "per-device", WIDE | most(100) | BREADTH),
    Design("pool-host", "pool-host", {}),
    Design("pool-numa", "pool-numa", {}),
    Design("pool-switch", "pool-switch", {}),
    Design("pool-host +wide +max1000 +bf", "pool-host", WIDE | most(1000) | BREADTH),
    Design("pool-numa +wide +max1000 +bf", "pool-numa", WIDE | most(1000) | BREADTH),
    # What Acceleron publishes now ([placement] pools on): placement.tree's own pools, in
    # the embedded Placement's options ([placement] embedded_*), and in Placement's defaults.
    Design("product", "product", WIDE | most(100) | BREADTH),
    Design("product-untuned", "product", {}),
]
# What a run measures unless told (a few minutes): today's, Placement's remedies, pools.
DEFAULT_DESIGNS = ("per-device", "per-device +wide +max100 +bf", "pool-host")


class Server:
    """Placement's WSGI application under uvicorn (one process) on ``database`` with
    ``options``; started again after a request it did not answer in time."""

    def __init__(self, database: str, options: Mapping[str, str], log: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        self.env.update({PLACEMENT_DB_ENV: database, **options})
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> None:
        port = free_port()
        argv = [
            str(Path(sys.executable).parent / "uvicorn"),
            "--factory",
            "scale:placement_wsgi",
            "--interface",
            "wsgi",
            "--app-dir",
            str(Path(__file__).parent),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
        with open(self.log, "a") as out:
            self.process = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, env=self.env
            )
        self.url = f"http://127.0.0.1:{port}"
        wait_ready(self.url, self.process, timeout=120)

    def stop(self) -> None:
        """Killed at once: a request given up on may still be computing."""
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid


@contextmanager
def serving(database: str, options: Mapping[str, str], log: Path) -> Iterator[Server]:
    server = Server(database, options, log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the requests ---------------------------------------------------------------------------

GPU = "CUSTOM_ACCELERATOR_GPU"
MIG = "CUSTOM_ACCELERATOR_MIG"
FPGA = "CUSTOM_ACCELERATOR_FPGA"
HBM = "CUSTOM_ACCELERATOR_MEMORY_HBM"
TRAITS = {
    GPU: "CUSTOM_GPU_NVIDIA_H200",
    MIG: "CUSTOM_NVIDIA_2335_MIG_1G_18GB",
    FPGA: "CUSTOM_FPGA_INTEL_PAC_ARRIA10",
}
SLICE_MB = 16384  # one 1g.18gb slice's memory, as the fake driver reports it


@dataclasses.dataclass(frozen=True)
class Ask:
    """A device profile: its name here, the kind of host it is for, its groups."""

    name: str
    kind: str
    groups: tuple[Mapping[str, str], ...]


def group(rc: str, n: int, memory: int = 0) -> dict[str, str]:
    found = {f"resources:{rc}": str(n), f"trait:{TRAITS[rc]}": "required"}
    if memory:
        found[f"resources:{HBM}"] = str(memory)
    return found


def asks() -> list[Ask]:
    """The request shapes: N whole GPUs as N groups of one and as one group of N; MIG
    slices with and without their memory beside them; FPGA regions."""
    found = [Ask("1 GPU", "gpu", (group(GPU, 1),))]
    for n in (2, 4, 6, 8):
        found.append(Ask(f"{n} GPUs, {n} groups of 1", "gpu", (group(GPU, 1),) * n))
        found.append(Ask(f"{n} GPUs, 1 group of {n}", "gpu", (group(GPU, n),)))
    for n in (2, 4):
        found.append(
            Ask(f"{n} MIG, {n} groups of 1 + memory", "mig", (group(MIG, 1, SLICE_MB),) * n)
        )
        found.append(Ask(f"{n} MIG, 1 group of {n}", "mig", (group(MIG, n),)))
        found.append(
            Ask(f"{n} MIG, 1 group of {n} + memory", "mig", (group(MIG, n, n * SLICE_MB),))
        )
    for n in (2, 4, 8):
        found.append(Ask(f"{n} FPGA, {n} groups of 1", "fpga", (group(FPGA, 1),) * n))
        # As a profile stores it: N groups of one (device_profiles.split_regions).
        stored = tuple(split_regions([group(FPGA, n)]))
        found.append(Ask(f"{n} FPGA, 1 group of {n} (stored as {n} of 1)", "fpga", stored))
    return found


def nova_query(ask: Ask) -> str:
    """Nova's ``GET /allocation_candidates`` for a flavor with the profile."""
    from acceleron.scheduler import query

    built_ = query.profile_query(list(ask.groups), flavor_resources=FLAVOR, limit=NOVA_LIMIT)
    params = sorted([*built_.params(), ("root_required", NOVA_ROOT_REQUIRED)])
    return f"/allocation_candidates?{urlencode(params)}"


def claim_query(ask: Ask, roots: Sequence[str], draw: random.Random) -> str:
    """The query a claim asks Placement on the tree of one of ``roots``, drawn at random
    (``candidate_queries``' first, for a profile that names no function)."""
    from acceleron.service.claim_allocation import Survey, candidate_queries

    root = draw.choice(roots)
    params = next(candidate_queries(list(ask.groups), Survey({}, frozenset({root}), only=root)))
    return f"/allocation_candidates?{urlencode(params)}"


# --- timing -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sample:
    """One request: its wall and Placement's CPU seconds, the allocation requests
    answered (None: no answer within the timeout) and on how many hosts."""

    wall: float
    cpu: float
    answered: int | None
    hosts: int = 0


@dataclasses.dataclass
class Series:
    samples: list[Sample] = dataclasses.field(default_factory=list)
    skipped: str = ""  # why it was not asked

    @property
    def timed_out(self) -> bool:
        return any(s.answered is None for s in self.samples)

    def percentile(self, p: float) -> float:
        ordered = sorted(s.wall for s in self.samples)
        return ordered[min(len(ordered) - 1, round((len(ordered) - 1) * p / 100))]

    @property
    def cpu(self) -> float:
        return sum(s.cpu for s in self.samples) / len(self.samples)

    @property
    def answered(self) -> int:
        return max(s.answered or 0 for s in self.samples)

    @property
    def hosts(self) -> int:
        return max(s.hosts for s in self.samples)

    def cell(self, spread: bool) -> str:
        """``p50[/p95] ms (CPU ms) answers``, or why there is no figure."""
        if self.skipped:
            return self.skipped
        if self.timed_out:
            return f"> {self.samples[-1].wall:.0f} s"
        times = _ms(self.percentile(50))
        if spread:
            times += f"/{_ms(self.percentile(95))}"
        hosts = f" on {self.hosts}" if spread and self.hosts else ""
        return f"{times} ({_ms(self.cpu)}) {self.answered}{hosts}"

    def to_json(self) -> dict[str, Any]:
        return {"skipped": self.skipped, "samples": [dataclasses.asdict(s) for s in self.samples]}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2g}" if seconds < 0.01 else f"{seconds * 1000:.0f}"


def asked(server: Server, path: str, microversion: str, timeout: float) -> Sample:
    request = urllib.request.Request(
        server.url + path,
        headers={
            "X-Auth-Token": "admin",
            "OpenStack-API-Version": f"placement {microversion}",
            "Accept": "application/json",
        },
    )
    cpu, started = cpu_seconds(server.pid), time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        raise RuntimeError(f"Placement answered {error.code} to {path}: {error.read()!r}") from None
    except (TimeoutError, urllib.error.URLError) as error:
        if isinstance(error, urllib.error.URLError) and not isinstance(error.reason, TimeoutError):
            raise
        return Sample(time.perf_counter() - started, cpu_seconds(server.pid) - cpu, None)
    wall = time.perf_counter() - started
    answers = body.get("allocation_requests", body.get("resource_providers", ()))
    summaries = body.get("provider_summaries", {})
    roots = {
        summaries[rp]["root_provider_uuid"] for a in answers for rp in a.get("allocations", ())
    }
    return Sample(wall, cpu_seconds(server.pid) - cpu, len(answers), len(roots))


def series(
    server: Server, path: Callable[[], str], microversion: str, count: int, args: argparse.Namespace
) -> Series:
    """Up to ``count`` requests (each ``path()`` afresh), while within ``--budget``
    seconds; after one that did not answer in time, none more, and the server is
    started again."""
    found = Series()
    started = time.perf_counter()
    while len(found.samples) < count:
        sample = asked(server, path(), microversion, args.timeout)
        found.samples.append(sample)
        if sample.answered is None:
            server.stop()
            server.start()
            break
        if time.perf_counter() - started >= args.budget:
            break
    return found


@dataclasses.dataclass
class Figures:
    """What one design answered at one number of hosts."""

    baseline: Series
    nova: dict[str, Series]
    claim: dict[str, Series]


def measure(
    design: Design,
    hosts: int,
    database: str,
    args: argparse.Namespace,
    log: Path,
    unanswered: set[tuple[str, str, str]],
) -> Figures:
    """Every request shape against one design's Placement with ``hosts`` hosts of each
    kind; ``unanswered``: (design, kind of query, request shape) that did not answer
    at fewer hosts, not asked again (and added to)."""
    from acceleron.placement.client import MICROVERSION

    count = args.samples if hosts > 1 else args.samples_one
    draw = random.Random(hosts)
    with serving(database, design.options, log) as server:
        tree = f"/resource_providers?in_tree={provider_uuid(hostname('gpu', 0))}"
        found = Figures(series(server, lambda: tree, MICROVERSION, count, args), {}, {})
        for ask in asks():
            roots = [provider_uuid(hostname(ask.kind, n)) for n in range(hosts)]
            queries: dict[str, tuple[Callable[[], str], str]] = {
                "nova": (functools.partial(nova_query, ask), NOVA_MICROVERSION),
                "claim": (functools.partial(claim_query, ask, roots, draw), MICROVERSION),
            }
            for what, (path, microversion) in queries.items():
                key = (design.name, what, ask.name)
                if key in unanswered:
                    result = Series(skipped="(none at fewer)")
                else:
                    result = series(server, path, microversion, count, args)
                    if result.timed_out:
                        unanswered.add(key)
                getattr(found, what)[ask.name] = result
    return found


# --- the claim's own view -------------------------------------------------------------------


def view_of(specs: Sequence[Spec], kind: str, hosts: int = 2) -> Any:
    """Acceleron's view (``claim_view.View``) of ``hosts`` hosts of ``kind``, nothing
    used: what a claim's survey draws (``TREES_TRIED`` hosts). As the view does, only
    accelerator classes: a group asking for memory finds no room (Placement's)."""
    from acceleron.placement import names
    from acceleron.placement.client import Capacity, ProviderSummary
    from acceleron.service.claim_view import View

    summaries = {}
    for n in range(hosts):
        host = hostname(kind, n)
        root = provider_uuid(host)
        for spec in specs:
            resources = {
                rc: Capacity(inv.total - inv.reserved, 0)
                for rc, inv in spec.inventories.items()
                if not names.is_memory_class(rc)
            }
            parent = root if spec.parent is None else provider_uuid(host, spec.parent)
            if resources:
                summaries[provider_uuid(host, spec.key)] = ProviderSummary(
                    resources, spec.traits, parent, root
                )
    return View(summaries)


def _view_child(specs: Sequence[Spec], ask: Ask, pipe: Any) -> None:
    from acceleron.scheduler import query

    view = view_of(specs, ask.kind)
    groups = query.profile_groups(list(ask.groups))
    cpu, started = time.process_time(), time.perf_counter()
    answer = view.candidates(groups)
    pipe.send(
        Sample(time.perf_counter() - started, time.process_time() - cpu, len(answer.requests))
    )


def viewed(specs: Sequence[Spec], ask: Ask, timeout: float) -> Series:
    """The view's choice for ``ask``, in a child process given up on after ``timeout``."""
    context = multiprocessing.get_context("fork")
    mine, theirs = context.Pipe()
    child = context.Process(target=_view_child, args=(specs, ask, theirs), daemon=True)
    started = time.perf_counter()
    child.start()
    if mine.poll(timeout):
        sample = mine.recv()
    else:
        sample = Sample(time.perf_counter() - started, timeout, None)
    child.kill()
    child.join()
    return Series([sample])


# --- the report -----------------------------------------------------------------------------


def table(title: str, columns: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> None:
    print(f"\n{title}\n")
    print("| | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, cells in rows:
        print(f"| {name} | " + " | ".join(cells) + " |")


def verdict(figures: Figures) -> str:
    """By Nova's query and by the claim's: how many request shapes were served (some
    candidate) in under 1 s at p95, which took longer or did not answer, and which
    were answered with no candidate."""
    parts = []
    for what in ("nova", "claim"):
        found: dict[str, Series] = getattr(figures, what)
        late = [n for n, s in found.items() if s.skipped or s.timed_out or s.percentile(95) >= 1]
        none = [n for n, s in found.items() if n not in late and s.answered == 0]
        parts.append(
            f"{what}: {len(found) - len(late) - len(none)} of {len(found)} served under 1 s; "
            f"slower or unanswered: {', '.join(late) or '-'}; "
            f"no candidate: {', '.join(none) or '-'}"
        )
    return "\n    ".join(parts)


def report(
    designs: Sequence[Design],
    hosts: Sequence[int],
    results: Mapping[tuple[str, int], Figures],
    views: Mapping[str, Mapping[str, Series]],
) -> None:
    names_ = [d.name for d in designs]
    print(
        "\nCells: wall p50[/p95] ms (Placement's CPU ms a request) allocation requests "
        "answered [on so many hosts]; '> T s': no answer in the timeout."
    )
    for count in hosts:
        spread = count > 1
        figures = [results[name, count] for name in names_]
        table(
            f"Baseline, {count} host(s) of each kind: GET /resource_providers?in_tree= (one host)",
            names_,
            [("baseline", [f.baseline.cell(spread) for f in figures])],
        )
        for what in ("nova", "claim"):
            rows = [
                (ask.name, [getattr(f, what)[ask.name].cell(spread) for f in figures])
                for ask in asks()
            ]
            table(f"{what}, {count} host(s) of each kind", names_, rows)
        print()
        for name, found in zip(names_, figures, strict=True):
            print(f"{count} host(s), {name}: {verdict(found)}")
    shapes_ = list(views)
    rows = [(ask.name, [views[s][ask.name].cell(False) for s in shapes_]) for ask in asks()]
    table("The claim's own view (two hosts' providers, no Placement)", shapes_, rows)


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--hosts", default="1,100", help="numbers of hosts of each kind, comma-separated (1,100)"
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="client timeout of each request, seconds (5)"
    )
    parser.add_argument(
        "--database",
        default="sqlite",
        help="sqlite, or the URL of a PostgreSQL server's database "
        "(postgresql+psycopg2://postgres@127.0.0.1:5432/postgres)",
    )
    parser.add_argument(
        "--designs",
        default="",
        help=f"designs to measure, comma-separated, or 'all' ({', '.join(DEFAULT_DESIGNS)}): "
        + ", ".join(d.name for d in DESIGNS),
    )
    parser.add_argument(
        "--samples", type=int, default=10, help="requests per figure with more than one host (10)"
    )
    parser.add_argument(
        "--samples-one", type=int, default=3, help="requests per figure with one host (3)"
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=3.0,
        help="seconds after which a figure takes no more samples (3)",
    )
    parser.add_argument("--out", help="write every sample here (JSON)")
    parser.add_argument(
        "--keep", help="keep the SQLite databases built in this directory, and use them again"
    )
    parser.add_argument("--build", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--specs", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=1, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    from importlib.metadata import version

    args = parse()
    if args.build:
        build(args)
        return
    wanted = {n.strip() for n in (args.designs or ",".join(DEFAULT_DESIGNS)).split(",")}
    designs = [d for d in DESIGNS if "all" in wanted or d.name in wanted]
    hosts = sorted(int(n) for n in args.hosts.split(","))
    print(
        f"{time.strftime('%Y-%m-%d %H:%M')}, load average {os.getloadavg()[0]:.1f}; "
        f"openstack-placement {version('openstack-placement')}; hosts {hosts} of each kind; "
        f"timeout {args.timeout:g} s; {args.database}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = shapes(work)
        urls: dict[tuple[str, int], str] = {}
        try:
            run(args, designs, hosts, trees, urls, work)
        finally:
            if args.database != "sqlite":
                drop_pg(args.database, list(urls.values()))


def run(
    args: argparse.Namespace,
    designs: Sequence[Design],
    hosts: Sequence[int],
    trees: Mapping[str, Mapping[str, Sequence[Spec]]],
    urls: dict[tuple[str, int], str],
    work: Path,
) -> None:
    log = work / "placement.log"
    used = list(dict.fromkeys(d.shape for d in designs))
    for shape in used:
        for count in hosts:
            urls[shape, count], seconds = built(work, args, shape, trees[shape], count, log)
            took = "kept" if seconds is None else f"{seconds:.1f} s"
            print(f"built {shape}, {count} host(s) of each kind: {took}", flush=True)
    views = {
        shape: {ask.name: viewed(trees[shape][ask.kind], ask, args.timeout) for ask in asks()}
        for shape in used
    }
    results: dict[tuple[str, int], Figures] = {}
    unanswered: set[tuple[str, str, str]] = set()
    for count in hosts:
        for design in designs:
            started = time.perf_counter()
            results[design.name, count] = measure(
                design, count, urls[design.shape, count], args, log, unanswered
            )
            print(
                f"measured {design.name}, {count} host(s): {time.perf_counter() - started:.0f} s"
                f", load average {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    report(designs, hosts, results, views)
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "results": {
                        f"{name} @ {count}": {
                            "baseline": f.baseline.to_json(),
                            "nova": {k: v.to_json() for k, v in f.nova.items()},
                            "claim": {k: v.to_json() for k, v in f.claim.items()},
                        }
                        for (name, count), f in results.items()
                    },
                    "views": {
                        s: {k: v.to_json() for k, v in found.items()} for s, found in views.items()
                    },
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
