"""Programming a region: the rules and the task, shared by the three ways in.

* a bind whose request names a function the region lacks (``binding.bind``);
* an admin's ``PATCH /v2/deployables/{uuid}/program`` (``program_deployable``);
* the run-time reprogramming of a bound request by its project (``bind_tasks.reprogram``).

Each queues one ``program`` task for the host's agent, which fetches, verifies and
programs the bitstream and reports phases (see ``acceleron.agent.tasks``). A region
is never reprogrammed under a workload that did not ask for it: while a request
other than the one asking holds it, or another bitstream is being programmed into
it, the answer is no.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, bindparam, select, update

from acceleron.bitstreams import signatures
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import Bitstream
from acceleron.db.models import AcceleratorRequest, AttachHandle, Deployable, Device, table
from acceleron.db.session import Database, retry_on_deadlock
from acceleron.exceptions import Conflict, InUse, NotFound
from acceleron.service import tasks
from acceleron.uuids import parse

DEPLOYABLES, DEVICES = table(Deployable), table(Device)
HANDLES, ARQS = table(AttachHandle), table(AcceleratorRequest)

REGION = select(
    DEPLOYABLES,
    DEVICES.c.hostname.label("device_hostname"),
    DEVICES.c.pci_address,
    DEVICES.c.state.label("device_state"),
    DEVICES.c.status.label("device_status"),
    DEVICES.c.health.label("device_health"),
    DEVICES.c.health_reason.label("device_health_reason"),
    DEVICES.c.maintenance_reason.label("device_maintenance_reason"),
).join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
_BY_UUID = REGION.where(DEPLOYABLES.c.uuid == bindparam("uuid"))
_OPEN_PROGRAMS = select(tasks.TASKS).where(
    tasks.TASKS.c.deployable_id == bindparam("dep"),
    tasks.TASKS.c.kind == "program",
    tasks.TASKS.c.state.in_(tasks.OPEN),
)


def bitstream_params(bitstream: Bitstream) -> dict[str, Any]:
    """What the agent needs to fetch and check a bitstream (and its signature, which the
    agent verifies where its host requires one)."""
    return {
        "id": bitstream.id,
        "name": bitstream.name,
        "size": bitstream.size,
        "hash_algo": bitstream.hash_algo,
        "hash_value": bitstream.hash_value,
        "function_uuid": bitstream.function_uuid,
        "region_type_uuid": bitstream.region_type_uuid,
        "signature": signatures.fields(bitstream.properties),
    }


def check_programmable(region: Row[Any]) -> None:
    if not region.programmable:
        raise Conflict(f"{region.name} is not a programmable region.")
    if region.device_state != "present":
        raise Conflict(f"{region.name} is on a device that is {region.device_state}.")


def busy_reason(
    conn: Connection,
    region_id: int,
    bitstream_id: str,
    arq_id: int | None,
    viewer: str | None = None,
) -> str | None:
    """Why ``bitstream_id`` cannot go into the region now, or None.

    Requests other than ``arq_id`` holding the region block it, unless they wait for
    the same bitstream (two accelerators of one group bound together); so does a
    different bitstream on its way in. The reason is for project ``viewer`` to read
    (None: an admin): it names only that project's requests and no bitstream.
    """
    programs = list(conn.execute(_OPEN_PROGRAMS, {"dep": region_id}))
    other = [t for t in programs if t.params.get("bitstream", {}).get("id") != bitstream_id]
    if other:
        named = f" ({other[0].params['bitstream'].get('id')})" if viewer is None else ""
        return f"another bitstream{named} is being programmed"
    waiting = {t.arq_id for t in programs}
    holders = conn.execute(
        select(ARQS.c.id, ARQS.c.uuid, ARQS.c.project_id)
        .join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
        .where(HANDLES.c.deployable_id == region_id, ARQS.c.id != (arq_id or -1))
    )
    blocking = [h for h in holders if h.id not in waiting]
    if not blocking:
        return None
    shown = [h.uuid for h in blocking if viewer is None or h.project_id == viewer]
    hidden = len(blocking) - len(shown)
    parts = [f"accelerator request(s) {', '.join(shown)}"] if shown else []
    if hidden:
        parts.append(f"{hidden} accelerator request(s) of other projects")
    return f"{' and '.join(parts)} use it with what it holds now"


def queue(
    conn: Connection, region: Row[Any], bitstream: Bitstream, arq_id: int | None = None
) -> str:
    """The program task for the region's host; the region shows it queued. The task
    names the request's project: the agent requires signatures per project."""
    project = None
    if arq_id is not None:
        project = conn.scalar(select(ARQS.c.project_id).where(ARQS.c.id == arq_id))
    params = {
        "project_id": project,
        "pci_address": region.pci_address,
        "deployable": region.key,
        "region_type": region.region_type,
        "bitstream": bitstream_params(bitstream),
    }
    uuid = tasks.create(
        conn,
        hostname=region.device_hostname,
        kind="program",
        params=params,
        arq_id=arq_id,
        deployable_id=region.id,
    )
    conn.execute(
        update(DEPLOYABLES)
        .where(DEPLOYABLES.c.id == region.id)
        .values(program_phase="queued", program_progress=0, program_error=None)
    )
    return uuid


_PROGRAMMING_FOR_ARQ = select(tasks.TASKS.c.deployable_id).where(
    tasks.TASKS.c.arq_id == bindparam("arq_id"),
    tasks.TASKS.c.kind == "program",
    tasks.IS_OPEN,
)


def cancel_for_arq(conn: Connection, arq_id: int) -> None:
    """Cancel a request's open tasks (its bind ended or was undone); a region whose
    programming that stops shows no program phase any more (what it holds is the
    agent's next report's to say)."""
    regions = list(conn.execute(_PROGRAMMING_FOR_ARQ, {"arq_id": arq_id}).scalars())
    tasks.cancel_for_arq(conn, arq_id)
    if regions:
        conn.execute(
            update(DEPLOYABLES)
            .where(DEPLOYABLES.c.id.in_(regions))
            .values(program_phase=None, program_progress=None)
        )


def lock(conn: Connection, region_id: int) -> None:
    """Take the region's row: binds and programs of one region queue on it, in one order.
    (SQLite's writer holds the whole database already: nothing to take.)"""
    if conn.dialect.name == "sqlite":
        return
    conn.execute(
        update(DEPLOYABLES)
        .where(DEPLOYABLES.c.id == region_id)
        .values(availability=DEPLOYABLES.c.availability)
    )


def get_region(conn: Connection, uuid: str) -> Row[Any]:
    region = conn.execute(_BY_UUID, {"uuid": uuid}).first()
    if region is None:
        raise NotFound(f"Deployable {uuid} not found.")
    return region


@retry_on_deadlock
def program_deployable(
    db: Database, uuid: str, bitstream_id: str, store: BitstreamStore
) -> tuple[Row[Any], str]:
    """An admin's program: queue it for a region nothing uses; the region and the task."""
    wanted = parse(uuid, "uuid")
    with db.reader() as conn:
        region = get_region(conn, wanted)
    check_programmable(region)
    bitstream = store.by_id(bitstream_id, region.region_type)
    with db.writer() as conn:
        lock(conn, region.id)
        reason = busy_reason(conn, region.id, "", None)
        if reason:
            raise InUse(f"{region.name} cannot be programmed now: {reason}.")
        task = queue(conn, region, bitstream)
        return get_region(conn, wanted), task
