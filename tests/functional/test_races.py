"""A bind racing a delete of the same accelerator request, hundreds of times per backend.

Whatever the order the database lets them run in, the end is one of two stories: the
bind never happened (it answers 404 or 409), or it happened and the delete undid it.
Never a handle left ``in_use`` with no request, an instance binding with no request
(that instance could never be bound again), or a vGPU made for a deleted request.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from sqlalchemy import delete, func, select, update

from acceleron.db.models import AcceleratorRequest, AttachHandle, InstanceBinding, Task, table
from acceleron.db.session import Database
from acceleron.exceptions import Conflict, NotFound
from acceleron.service import arqs as service
from acceleron.service import binding, device_profiles
from tests.fixtures.arqs import ADMIN, HOST

TRIALS = 200
ARQS, HANDLES, TASKS = table(AcceleratorRequest), table(AttachHandle), table(Task)
BINDINGS = table(InstanceBinding)


def race(db: Database, rp: str, outcomes: dict[str, int]) -> list[str]:
    """One trial: a bind and a delete of one new request, started together; what they
    left behind that they should not have."""
    arq = service.create(db, ADMIN, "vgpu")[0].uuid
    instance = str(uuid.uuid4())
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def bind() -> None:
        barrier.wait()
        try:
            binding.bind(db, ADMIN, [service.Binding(arq, HOST, rp, instance)])
            outcomes["bound first"] += 1
        except (NotFound, Conflict) as error:
            outcomes[f"bind refused: {type(error).__name__}"] += 1
        except BaseException as error:
            errors.append(error)

    def delete() -> None:
        barrier.wait()
        try:
            service.delete_arqs(db, ADMIN, [arq])
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=bind), threading.Thread(target=delete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return left_behind(db, instance)


def left_behind(db: Database, instance: str) -> list[str]:
    """What a trial left that no request explains; cleared for the next trial."""
    found = []
    with db.writer() as conn:
        if conn.execute(select(func.count()).select_from(ARQS)).scalar():
            found.append("the request survived its delete")
        if conn.execute(select(HANDLES.c.id).where(HANDLES.c.in_use.is_(True))).first():
            found.append("a handle in use with no request")
            conn.execute(update(HANDLES).values(in_use=False, arq_id=None))
        if conn.execute(delete(BINDINGS).where(BINDINGS.c.instance_uuid == instance)).rowcount:
            found.append("the instance bound with no request")
        made = (TASKS.c.kind == "create_mdev") & TASKS.c.state.in_(("pending", "running"))
        if conn.execute(update(TASKS).where(made).values(state="cancelled")).rowcount:
            found.append("a vGPU to be made for a deleted request")
    return found


def test_bind_and_delete_of_one_request_serialise(
    db: Database, inventory_of_host: dict[str, Any]
) -> None:
    device_profiles.create(db, name="vgpu", groups=[{"resources:CUSTOM_ACCELERATOR_VGPU": "1"}])
    rp = inventory_of_host["vgpu"][0].rp_uuid
    outcomes: dict[str, int] = {
        "bound first": 0,
        "bind refused: NotFound": 0,
        "bind refused: Conflict": 0,
    }
    broken = [problems for _ in range(TRIALS) if (problems := race(db, rp, outcomes))]
    assert broken == [], f"{len(broken)} of {TRIALS} trials broke: {broken[:3]} ({outcomes})"
    assert sum(outcomes.values()) == TRIALS
    # A request deleted under a bind is not found, not a conflict.
    assert outcomes["bind refused: Conflict"] == 0, outcomes
