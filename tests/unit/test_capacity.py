"""The threads for database work: a share kept for services, a bounded wait for others."""

from __future__ import annotations

import threading

import anyio
import pytest

from acceleron.api.capacity import Threads, UploadSlots
from acceleron.exceptions import OverLimit, Overloaded


def test_services_keep_their_share_when_everyone_else_waits() -> None:
    threads = Threads(4, reserve_percent=25, queue_timeout=0.2)
    assert threads.reserved == 1
    release = threading.Event()
    ran: list[str] = []
    running: list[int] = []

    def busy() -> None:
        running.append(1)
        release.wait(30)

    def quick(who: str) -> None:
        ran.append(who)

    async def main() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(3):  # every thread users may take
                group.start_soon(threads.database, False, busy)
            while len(running) < 3:
                await anyio.sleep(0.01)
            with pytest.raises(Overloaded):
                await threads.database(False, quick, "user")  # waits, then 503
            await threads.database(True, quick, "agent")  # the share kept for services
            release.set()
        await threads.database(False, quick, "user, later")

    anyio.run(main)
    assert ran == ["agent", "user, later"]


def test_a_project_has_so_many_upload_slots() -> None:
    slots = UploadSlots(per_project=2)
    with slots.taken("p1"), slots.taken("p1"):
        with pytest.raises(OverLimit, match="2 upload"), slots.taken("p1"):
            pass
        with slots.taken("p2"):
            pass
    with slots.taken("p1"):
        pass
