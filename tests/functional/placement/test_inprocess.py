"""The embedded Placement on an SQLite file (the all-in-one's): its connections."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Run in a process of its own: Placement's database layer is process-global, and the
# other tests' Placement is in memory.
SCRIPT = """
import json, sys
from sqlalchemy import event
from acceleron.placement import inprocess

app = inprocess.placement_app(f"sqlite:///{sys.argv[1]}")
engine = inprocess.placement_engine()
opened = []
event.listen(engine, "connect", lambda *_: opened.append(1))
placement = inprocess.direct_adapter(app)
codes = [placement.get("/resource_providers", microversion="1.39").status_code
         for _ in range(20)]
with engine.connect() as connection:
    mode = connection.exec_driver_sql("PRAGMA journal_mode").scalar()
    regexp = connection.exec_driver_sql("SELECT 'abc' REGEXP '^a'").scalar()  # oslo.db's
print(json.dumps({"codes": sorted(set(codes)), "opened": len(opened), "mode": mode,
                  "regexp": regexp, "pool": type(engine.pool).__name__}))
"""


def test_connections_are_kept_between_requests_and_keep_the_write_ahead_log(
    tmp_path: Path,
) -> None:
    """oslo.db gives an SQLite file no pool; the embedded Placement keeps its connections
    (20 requests open at most one more), and a new one is still set up by the pragmas
    and by oslo.db's own listeners (its REGEXP function)."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "placement.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    found = json.loads(done.stdout.splitlines()[-1])
    assert found == {
        "codes": [200],
        "opened": found["opened"],
        "mode": "wal",
        "regexp": 1,
        "pool": "QueuePool",
    }
    assert found["opened"] <= 1, found
