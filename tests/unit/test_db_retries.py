"""Transactions the database rolled back so that they may run again: Galera's
certification failures and deadlocks are retried, counted by reason, and outside a
retried operation are a DatabaseBusy (503 with Retry-After), never an unmapped error."""

from __future__ import annotations

from pathlib import Path

import pymysql
import pytest
from sqlalchemy import exc as sa_exc

from acceleron import metrics
from acceleron.db.session import Database, retry_on_deadlock, retry_reason
from acceleron.exceptions import DatabaseBusy

CERTIFICATION = pymysql.err.OperationalError(
    1213,
    "WSREP detected deadlock/conflict and aborted the transaction. Try restarting the transaction",
)
DEADLOCK = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock")


def lost(orig: Exception) -> sa_exc.OperationalError:
    return sa_exc.OperationalError("COMMIT", {}, orig)


def retries(reason: str) -> float:
    return float(metrics.DB_RETRIES.labels(reason)._value.get())


def test_reasons() -> None:
    assert retry_reason(lost(CERTIFICATION)) == "certification"
    assert retry_reason(lost(DEADLOCK)) == "deadlock"
    assert retry_reason(lost(pymysql.err.OperationalError(1205, "Lock wait timeout"))) == (
        "lock_wait_timeout"
    )
    assert retry_reason(lost(pymysql.err.OperationalError(2013, "Lost connection"))) is None


def test_a_certification_failure_at_commit_runs_the_operation_again(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    calls = []
    before = retries("certification")

    @retry_on_deadlock
    def write() -> str:
        with db.writer():
            calls.append(1)
            if len(calls) < 3:
                raise lost(CERTIFICATION)
        return "done"

    assert write() == "done" and len(calls) == 3
    assert retries("certification") == before + 2


def test_outside_a_retried_operation_it_is_a_503_not_a_500(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with pytest.raises(DatabaseBusy), db.writer():
        raise lost(CERTIFICATION)
    with pytest.raises(DatabaseBusy), db.reader():
        raise lost(DEADLOCK)
