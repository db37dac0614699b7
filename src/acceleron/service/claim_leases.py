"""Who is at work on a claim, and for how long (docs/claims.md, "Interrupted claims").

A claim's row names the process at work on it (``owner``: machine, boot, process id and
a token of the process's own) and until when (``lease_until``). Each step its maker
records holds only while the claim is still the maker's and its lease runs
(``record_step``); a claim whose maker is gone (``abandoned``) is taken over to be
undone (``take``).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import socket
import threading
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row, select, update

from acceleron.db.models import Claim, table, utcnow
from acceleron.db.session import Database
from acceleron.exceptions import Conflict

CLAIMS = table(Claim)
ATTEMPTS = 5  # a claim or an allocation read again, at most, when it changed meanwhile


class GivenUp(Conflict):
    """The claim was given up while being made: it outlived ``[claims] timeout``, or its
    release began. Its maker stops (and undoes what it alone knows it did)."""


_active: set[int] = set()  # the claims this process is at work on (making or undoing)
_asked: dict[int, dict[str, dict[str, int]]] = {}  # what its makers last asked Placement for
_active_lock = threading.Lock()


@functools.cache
def _identity(pid: int) -> str:
    """This process, as a claim's ``owner`` names it: machine (host name and boot), process
    id and a token of this process's own (a process id is reused)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()[:150]}/{boot}/{pid}/{uuidlib.uuid4().hex[:12]}"


def worker() -> str:
    """The ``owner`` this process writes in the claims it works on."""
    return _identity(os.getpid())


def working(claim_id: int) -> None:
    with _active_lock:
        _active.add(claim_id)


def stopped(claim_id: int) -> None:
    """This process no longer works on the claim (made, undone, or left to recovery)."""
    with _active_lock:
        _active.discard(claim_id)
        _asked.pop(claim_id, None)


def idle(claim_id: int) -> None:
    """An undo of the claim ended (what its maker asked for stays its maker's to know)."""
    with _active_lock:
        _active.discard(claim_id)


def _alive(owner: str | None, claim_id: int) -> bool:
    """Whether the process named ``owner`` may still be at work on the claim, as far as
    this process can tell: one of this machine's is gone when its process is (or when
    it is this process, and it stopped working on the claim); another machine's is
    trusted until its lease ends."""
    if owner is None:
        return False
    parts = owner.rsplit("/", 3)
    mine = worker().rsplit("/", 3)
    if len(parts) != 4 or not parts[1] or parts[:2] != mine[:2]:
        return True
    if owner == worker():
        with _active_lock:
            return claim_id in _active
    pid = int(parts[2]) if parts[2].isdigit() else 0
    if pid <= 0 or pid == os.getpid():
        return False  # an earlier process with this id
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True  # alive (or its id reused): its lease says


def abandoned(claim: Row[Any], timeout: float, now: dt.datetime | None = None) -> bool:
    """Whether the claim (being made or released) has no maker any more: its lease
    passed, or its maker is gone. One from before leases existed is abandoned
    ``timeout`` seconds after it was made."""
    now = now or utcnow()
    if claim.lease_until is None:
        return bool(claim.created_at + dt.timedelta(seconds=timeout) <= now)
    return bool(claim.lease_until <= now) or not _alive(claim.owner, claim.id)


def record_step(conn: Connection, claim: Row[Any], step: str, **values: Any) -> None:
    """Record how far the maker got: only while the claim is still being made by it,
    within its lease (GivenUp otherwise, and the caller's transaction is undone)."""
    now = utcnow()
    done = conn.execute(
        update(CLAIMS)
        .where(
            CLAIMS.c.id == claim.id,
            CLAIMS.c.state == "allocating",
            CLAIMS.c.owner == claim.owner,
            CLAIMS.c.lease_until > now,
        )
        .values(step=step, updated_at=now, **values)
    )
    if done.rowcount != 1:
        raise GivenUp(
            f"The claim of {claim.consumer} was given up while being made (it took longer "
            f"than [claims] timeout allows, or it is being released): claim again."
        )


def take(db: Database, claim: Row[Any], timeout: float, states: Sequence[str]) -> Row[Any] | None:
    """Take the claim over to undo it (``releasing``, this process at work on it), if it
    is still as it was read (in one of ``states``, same owner); the claim as taken."""
    with db.writer() as conn:
        taken = seize(conn, claim, timeout, states)
    if taken is not None:
        working(claim.id)
    return taken


def seize(
    conn: Connection, claim: Row[Any], timeout: float, states: Sequence[str]
) -> Row[Any] | None:
    """What ``take`` writes, in the caller's transaction (which then calls ``working``
    once it committed, as ``take`` does); the claim as taken, None when it changed."""
    now = utcnow()
    done = conn.execute(
        update(CLAIMS)
        .where(
            CLAIMS.c.id == claim.id,
            CLAIMS.c.state.in_(states),
            CLAIMS.c.state == claim.state,
            CLAIMS.c.owner.is_not_distinct_from(claim.owner),
        )
        .values(
            state="releasing",
            owner=worker(),
            updated_at=now,
            lease_until=now + dt.timedelta(seconds=timeout),
        )
    )
    if done.rowcount != 1:
        return None
    return conn.execute(select(CLAIMS).where(CLAIMS.c.id == claim.id)).one()


def remember(claim_id: int, asked: Mapping[str, Mapping[str, int]]) -> None:
    """What the claim's maker asked Placement for: the maker may have to drop it itself."""
    with _active_lock:
        _asked[claim_id] = {rp: dict(r) for rp, r in asked.items()}


def asked_for(claim_id: int) -> dict[str, dict[str, int]] | None:
    """What the claim's maker last asked Placement for (None: nothing, or not this process)."""
    with _active_lock:
        return _asked.get(claim_id)
