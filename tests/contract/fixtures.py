"""The state each contract file starts from: gabbi fixtures, named in a file's ``fixtures``.

``Api`` serves Acceleron on a SQLite database of its own (noauth: without ``X-Roles`` a
request is an admin's of project ``admin``), its lifespan run as a server runs it; each
fixture after it adds state the file reads through ``$ENVIRON``. Requests reach the app
in-process: gabbi's client speaks WSGI to a2wsgi's bridge, which runs the ASGI app on the
event loop the lifespan ran on. No socket is opened.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
from collections.abc import Iterable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from a2wsgi import ASGIMiddleware
from gabbi.fixture import GabbiFixture  # type: ignore[import-untyped]
from oslo_config import cfg
from sqlalchemy import select

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.db import migrate
from acceleron.db.models import Deployable, Device, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.placement import inprocess
from acceleron.report import HostReport
from acceleron.service import inventory
from tests.fixtures.placement import reset_placement

HOST = "host-1"
# Seconds the app has to start or stop (its lifespan); a request has gabbi's timeout.
LIFESPAN_TIMEOUT = 30
DEVICE, DEPLOYABLE = table(Device), table(Deployable)


class Running:
    """The app the current file talks to (one file runs at a time in a process)."""

    app: ASGIMiddleware | None = None
    conf: cfg.ConfigOpts | None = None
    db: Database | None = None


def intercept() -> Any:
    """gabbi's app factory, called while the files are read (before any fixture starts):
    a WSGI app handing each request to the app the running file's ``Api`` started."""

    def forward(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        assert Running.app is not None, "a contract file names no Api fixture"
        return Running.app(environ, start_response)  # type: ignore[arg-type]

    return forward


class Api(GabbiFixture):  # type: ignore[misc]
    """The API on an empty, migrated SQLite database; Placement disabled, noauth."""

    # Configuration beside the defaults, by group, as a subclass needs it.
    OVERRIDES: dict[str, dict[str, object]] = {}

    def start_fixture(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="contract-"))
        defaults: dict[str, dict[str, object]] = {
            "DEFAULT": {"state_path": str(self.state), "host": HOST}
        }
        conf = confmod.load([], config_files=[], overrides={**defaults, **self.OVERRIDES})
        self.db = Database(f"sqlite:///{self.state / 'acceleron.sqlite'}")
        migrate.upgrade(self.db)
        self.app = create_app(conf, self.db)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="contract-app", daemon=True
        )
        self.thread.start()
        self.lifespan: AbstractAsyncContextManager[Any] = self.app.router.lifespan_context(self.app)
        self._on_loop(self.lifespan.__aenter__())
        Running.app = ASGIMiddleware(self.app, loop=self.loop)  # type: ignore[arg-type]
        Running.conf, Running.db = conf, self.db

    def stop_fixture(self) -> None:
        Running.app = Running.conf = Running.db = None
        try:
            self._on_loop(self.lifespan.__aexit__(None, None, None))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(LIFESPAN_TIMEOUT)
            self.loop.close()
            self.db.dispose()
            shutil.rmtree(self.state, ignore_errors=True)

    def _on_loop(self, step: Any) -> None:
        asyncio.run_coroutine_threadsafe(step, self.loop).result(LIFESPAN_TIMEOUT)


class QuotaApi(Api):
    """The API with config-file limits: every project may hold 2 QAT accelerators,
    project p2 may hold 3."""

    OVERRIDES = {
        "quota": {
            "limits": ["class:CUSTOM_ACCELERATOR_QAT=2"],
            "project_limits": ["p2/class:CUSTOM_ACCELERATOR_QAT=3"],
        }
    }


class PlacementApi(Api):
    """The API with the real Placement embedded (as the all-in-one runs it), emptied
    first: Placement runs once a process, in memory, as tests/fixtures/placement.py
    runs it for the other tests. Files that take it are marked ``placement`` (make check
    leaves them out)."""

    OVERRIDES = {"placement": {"mode": "embedded", "embedded_connection": "sqlite://"}}

    def start_fixture(self) -> None:
        inprocess.placement_app("sqlite://")
        reset_placement()
        super().start_fixture()


def running() -> tuple[cfg.ConfigOpts, Database]:
    assert Running.conf is not None and Running.db is not None, "Api must come first"
    return Running.conf, Running.db


# What a file reads as $ENVIRON['NAME'] once Inventory ran: the uuids of the fake
# driver's devices (by PCI address) and deployables (by device and name).
DEVICES = {
    "FPGA_DEVICE": "0000:1a:00.0",  # PAC_ARRIA10: region0 (2 accelerators), region1 (1)
    "GPU_DEVICE": "0000:1c:00.0",  # T4: vGPU types nvidia-222 and nvidia-223
    "MIG_DEVICE": "0000:1d:00.0",  # H100: MIG profiles
    "QAT_DEVICE": "0000:1e:00.0",  # C62X: a VF pool of 4
}
DEPLOYABLES = {
    "FPGA_REGION": "host-1_0000:1a:00.0_region0",
    "FPGA_REGION_1": "host-1_0000:1a:00.0_region1",
    "VGPU_TYPE": "host-1_0000:1c:00.0_vgpu/nvidia-222",
    "QAT_POOL": "host-1_0000:1e:00.0_vf_pool",
}


class Inventory(GabbiFixture):  # type: ignore[misc]
    """host-1's fake-driver inventory, reported as its agent reports it; the uuids of
    DEVICES and DEPLOYABLES in the environment."""

    def start_fixture(self) -> None:
        conf, db = running()
        devices = tuple(FakeDriver(conf, Path("/")).discover())
        inventory.reconcile(db, HostReport(HOST, "1", devices))
        with db.reader() as conn:
            by_address = {r.pci_address: r.uuid for r in conn.execute(select(DEVICE))}
            by_name = {r.name: r.uuid for r in conn.execute(select(DEPLOYABLE))}
        self.names = [*DEVICES, *DEPLOYABLES]
        os.environ.update({name: by_address[address] for name, address in DEVICES.items()})
        os.environ.update({name: by_name[full] for name, full in DEPLOYABLES.items()})
        # Any spelling of a uuid finds what it names: upper case, no dashes.
        os.environ["FPGA_DEVICE_SPELLED"] = (
            by_address[DEVICES["FPGA_DEVICE"]].upper().replace("-", "")
        )
        self.names.append("FPGA_DEVICE_SPELLED")

    def stop_fixture(self) -> None:
        for name in self.names:
            os.environ.pop(name, None)
