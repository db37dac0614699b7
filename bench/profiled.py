"""The ``acceleron`` command with a cProfile of its main thread, and a count of the
statements that thread runs, that signals turn on and off (what
``load.all_in_one(profile=...)`` and ``load.profiling`` use). The profile counts the
thread's CPU time (``time.thread_time``): on a shared machine, wall time would count
what the other guests do while the thread waits for a core.

SIGUSR1 starts both; SIGUSR2 stops them and writes the profile's statistics to the
file ``$ACCELERON_PROFILE`` and the statements, by verb, as JSON beside it
(``.statements.json``). The main thread is the event loop's: on SQLite every service
call runs there too, so the profile holds a request's whole path, HTTP parsing to the
database, and leaves out only the agent's and the embedded Placement's threads.

    ACCELERON_PROFILE=/tmp/api.prof .venv/bin/python bench/profiled.py all-in-one ...
"""

from __future__ import annotations

import collections
import cProfile
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from sqlalchemy import Engine, event

from acceleron.cli.main import console

PROFILER = cProfile.Profile(time.thread_time)
STATEMENTS: collections.Counter[str] = collections.Counter()
COUNTING = threading.Event()


def count(*args: Any) -> None:
    if COUNTING.is_set() and threading.current_thread() is threading.main_thread():
        STATEMENTS[str(args[2]).lstrip().split(None, 1)[0].upper()] += 1


def start(signum: int, frame: FrameType | None) -> None:
    STATEMENTS.clear()
    COUNTING.set()
    PROFILER.enable()


def stop(signum: int, frame: FrameType | None) -> None:
    PROFILER.disable()
    COUNTING.clear()
    path = Path(os.environ["ACCELERON_PROFILE"])
    path.with_suffix(".statements.json").write_text(json.dumps(STATEMENTS))
    PROFILER.dump_stats(str(path))


if __name__ == "__main__":
    event.listen(Engine, "before_cursor_execute", count)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv[0] = "acceleron"
    console()
