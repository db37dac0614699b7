"""One API process at a time publishes a host's pending change (``hosts.sync_owner``, a
lease in the database's time): a host another process holds is left to it, and taken
over once that process's lease has passed."""

from __future__ import annotations

from typing import Any

import requests
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron.db.clock import clock
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.placement.client import PlacementClient
from acceleron.service import inventory
from acceleron.service.placement import PlacementService
from tests.fixtures.fake_host import HOST, host_report, syncer
from tests.fixtures.placement import CountingAdapter

HOSTS = table(Host)


def _lease(db: Database, owner: str | None, seconds: float) -> None:
    """Another API process holds the host's lease for ``seconds`` more (passed: < 0)."""
    with db.writer() as conn:
        conn.execute(
            update(HOSTS)
            .where(HOSTS.c.hostname == HOST)
            .values(sync_owner=owner, sync_until=clock(seconds))
        )


def _host(db: Database) -> Host:
    with db.reader() as conn:
        row = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
    return row  # type: ignore[return-value]


def test_a_host_another_process_publishes_is_left_to_it_until_its_lease_passes(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    inventory.reconcile(db, host_report(conf))
    sync = syncer(db, counted)
    _lease(db, "another-api-process", 60)
    assert sync.sync_pending() == [] and counted.calls == []  # not a call to Placement
    assert _host(db).synced_generation != _host(db).generation
    _lease(db, "another-api-process", -1)  # that process stopped: its lease passed
    [done] = sync.sync_pending()
    assert (done.hostname, done.errors) == (HOST, []) and counted.writes
    host = _host(db)
    assert host.synced_generation == host.generation
    assert (host.sync_owner, host.sync_until) == (None, None)  # given back
    assert sync.sync_pending() == []  # nothing pending


class _LeaseSeen(CountingAdapter):
    """Reads the host's lease, in the database's time, at the sync's first write."""

    def __init__(self, inner: CountingAdapter, db: Database) -> None:
        super().__init__(inner.inner)
        self.db = db
        self.left: list[float] = []

    def request(self, url: str, method: str, **kwargs: Any) -> requests.Response:
        if method.upper() != "GET" and not self.left:
            with self.db.reader() as conn:
                until, now = conn.execute(
                    select(HOSTS.c.sync_until, clock(0)).where(HOSTS.c.hostname == HOST)
                ).one()
            self.left.append((until - now).total_seconds())
        return super().request(url, method, **kwargs)


def test_a_process_holds_a_host_for_its_configured_lease(
    db: Database, conf: cfg.ConfigOpts, counted: CountingAdapter
) -> None:
    conf.set_override("sync_lease", 7, "placement")
    conf.set_override("mode", "embedded", "placement")  # it makes the compute node itself
    inventory.reconcile(db, host_report(conf))
    seen = _LeaseSeen(counted, db)
    service = PlacementService(conf, db, lambda: PlacementClient(seen))
    [done] = service.syncer().sync_pending()
    assert done.errors == [] and len(seen.left) == 1
    assert 0 < seen.left[0] <= 7.0, seen.left  # not the default 60 s
