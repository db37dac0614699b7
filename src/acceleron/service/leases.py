"""Work that one API process of a region does at a time (docs/reconciler.md, "Who").

A lease is a row of ``leases``: the process holding it (a token new for each process)
and until when, written and compared in the database's time. A process holds it while
it renews it before its lease passes; another takes it once it has passed (the holder
stopped, or lost the database). The periodic passes that read every host once an
interval, the verification of the hosts' providers and the reconciler's, run in the
process holding ``PERIODIC``: the region's Placement serves them once, however many API
processes there are.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid as uuidlib

from sqlalchemy import insert, or_, select, update
from sqlalchemy.exc import IntegrityError

from acceleron.db.clock import clock
from acceleron.db.models import Lease, table
from acceleron.db.session import Database
from acceleron.exceptions import AcceleronError

LOG = logging.getLogger(__name__)
LEASES = table(Lease)
PERIODIC = "periodic"  # the verification's and the reconciler's passes
# Seconds a lease runs from its last renewal: several of the periodic passes' ticks (about
# 5 s each), so that the holder renews it many times before it passes.
TERM = 30.0


def hold(db: Database, name: str, owner: str, seconds: float = TERM) -> bool:
    """Take or renew the lease ``name`` for ``owner``, for ``seconds`` from now (the
    database's time): whether ``owner`` holds it (it was its own, free, or passed)."""
    with db.writer() as conn:
        taken = conn.execute(
            update(LEASES)
            .where(LEASES.c.name == name, or_(LEASES.c.owner == owner, LEASES.c.until <= clock()))
            .values(owner=owner, until=clock(seconds))
        )
        if taken.rowcount == 1:
            return True
        if conn.execute(select(LEASES.c.name).where(LEASES.c.name == name)).first():
            return False  # another's, and it runs
    try:
        with db.writer() as conn:
            conn.execute(insert(LEASES).values(name=name, owner=owner, until=clock(seconds)))
    except IntegrityError:  # another process made it meanwhile
        return False
    return True


@dataclasses.dataclass
class Holder:
    """This process's claim to the lease ``name``; ``holds`` says whether it holds it
    now (renewing it), and logs when that changes."""

    db: Database
    name: str = PERIODIC
    owner: str = dataclasses.field(default_factory=lambda: uuidlib.uuid4().hex)
    held: bool = False

    def holds(self) -> bool:
        """Whether this process holds the lease (taken or renewed now); False while the
        database is away (the work waits, as it would have failed)."""
        try:
            held = hold(self.db, self.name, self.owner)
        except AcceleronError as error:
            LOG.warning("Cannot renew the lease of %s (%s)", self.name, error.message)
            held = False
        if held != self.held:
            LOG.info(
                "This process %s the %s passes",
                "does" if held else "no longer does",
                self.name,
            )
            self.held = held
        return held
