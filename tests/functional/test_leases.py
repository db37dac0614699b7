"""Work one API process of a region does at a time (``service.leases``), on every
backend: one process holds a lease while it renews it, another takes it once it has
passed; and of two API processes' sync threads, only the one holding the lease of the
periodic passes verifies the hosts' trees in Placement."""

from __future__ import annotations

import datetime as dt

import pytest
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import select, update

from acceleron.api.workers import SyncWorker
from acceleron.db.models import Lease, table, utcnow
from acceleron.db.session import Database
from acceleron.service import inventory, leases
from tests.fixtures.fake_host import HOST, report, syncer
from tests.fixtures.placement import CountingAdapter
from tests.fixtures.waiting import wait_for

LEASES = table(Lease)


def passed(db: Database) -> None:
    """The holder stopped renewing, and the database's time moved past its lease."""
    with db.writer() as conn:
        conn.execute(update(LEASES).values(until=utcnow() - dt.timedelta(hours=1)))


def test_a_lease_is_its_holder_s_until_it_passes(db: Database) -> None:
    assert leases.hold(db, "work", "first")
    assert not leases.hold(db, "work", "second")
    assert leases.hold(db, "work", "first")  # renewed
    assert leases.hold(db, "other work", "second")  # another lease, another row
    passed(db)
    assert leases.hold(db, "work", "second")
    assert not leases.hold(db, "work", "first")
    with db.reader() as conn:
        owners = dict(conn.execute(select(LEASES.c.name, LEASES.c.owner)).all())
    assert owners == {"work": "second", "other work": "second"}


def test_one_holder_of_two_takes_the_passes_and_the_other_follows_once_it_stops(
    db: Database,
) -> None:
    first, second = leases.Holder(db), leases.Holder(db)
    assert first.owner != second.owner
    assert first.holds() and not second.holds()
    assert first.holds() and not second.holds()
    passed(db)  # the first process died
    assert second.holds() and not first.holds()


@pytest.mark.placement
def test_of_two_api_processes_one_verifies_the_hosts(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter
) -> None:
    """Two sync threads (two API processes) verifying every host each second: the trees
    are read by the one holding the lease alone, and the other skips its ticks."""
    inventory.reconcile(db, report(conf, HOST))
    syncer(db, CountingAdapter(placement)).sync_host(HOST)
    counted = [CountingAdapter(placement), CountingAdapter(placement)]
    holders = [leases.Holder(db), leases.Holder(db)]
    workers = [
        SyncWorker(lambda c=c: syncer(db, c), 3600, 1, leads=h.holds)  # type: ignore[misc]
        for c, h in zip(counted, holders, strict=True)
    ]

    def tree_reads(adapter: CountingAdapter) -> int:
        return sum(c.method == "GET" and c.path == "/resource_providers" for c in adapter.calls)

    for worker in workers:
        worker.start()
    try:
        wait_for(lambda: min(w.passes for w in workers) >= 3)
    finally:
        for worker in workers:
            worker.stop()
    reads = [tree_reads(c) for c in counted]
    leader = [h.held for h in holders].index(True)
    assert reads[leader] >= 1 and reads[1 - leader] == 0, reads
