"""Cyborg's database, as ``acceleron adopt cyborg`` reads it (service/adopt.py): its
devices, deployables, attach handles, device profiles and accelerator requests, in one
read-only transaction (SQLAlchemy Core over Cyborg's own tables: no models, the schema is
Cyborg's), once its schema is one this release knows (``SCHEMAS``). It is never written,
nor created: a SQLite file that does not exist is refused.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Connection, column, create_engine, select, table
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError

from acceleron.exceptions import InvalidInput

# Cyborg's schemas (their Alembic revisions, ``alembic_version``) that this release
# reads: what it reads of them is the same in each (Cyborg's own migrations). Cyborg 17
# adds the device types MDEV, PCI and NVME and a device_state column; its release makes
# all three revisions at once (9625668549b5, a35b4295a0e5, b47c8f2d1e3a).
SCHEMAS = {
    "6c77bd6afea5": "Cyborg 11 to 16 (2023.2 to 2026.1)",
    "b47c8f2d1e3a": "Cyborg 17 (2026.2)",
}
# The others Cyborg has made, oldest first: an older release's, or an upgrade stopped
# half way.
OLDER_SCHEMAS = (
    "f50980397351", "d6f033d8fa5b", "ede4e3f1a232", "589ff20545b7", "c1b5abada09c",
    "57539722e5cf", "22fb1af2d51e", "7b696fd94949", "62bcf2610c5d", "7a4fd0fc3f8c",
    "60d8ac91fd20", "7e6f1f107f2b", "899cead40bc9", "4cc1d79978fc", "9625668549b5",
    "a35b4295a0e5",
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class CyborgDevice:
    id: int
    uuid: str
    hostname: str
    address: str | None  # canonical PCI address from its control path id; None: unreadable


@dataclasses.dataclass(frozen=True)
class CyborgDeployable:
    id: int
    uuid: str
    name: str
    device_id: int
    rp_uuid: str | None
    resource_class: str | None  # its ``rc`` attribute


@dataclasses.dataclass(frozen=True)
class CyborgHandle:
    id: int
    uuid: str
    deployable_id: int
    address: str | None  # canonical PCI address from attach_info; None: unreadable


@dataclasses.dataclass(frozen=True)
class CyborgProfile:
    id: int
    uuid: str
    name: str
    description: str | None
    groups: list[dict[str, str]] | None  # None: profile_json unreadable


@dataclasses.dataclass(frozen=True)
class CyborgArq:
    uuid: str
    state: str
    project_id: str | None
    profile_id: int
    group_id: int
    hostname: str | None
    rp_uuid: str | None
    instance_uuid: str | None
    handle_id: int | None
    created_at: dt.datetime | None = None
    updated_at: dt.datetime | None = None  # naive UTC, as Cyborg writes it


@dataclasses.dataclass(frozen=True)
class Cyborg:
    devices: Sequence[CyborgDevice] = ()
    deployables: Sequence[CyborgDeployable] = ()
    handles: Sequence[CyborgHandle] = ()
    profiles: Sequence[CyborgProfile] = ()
    arqs: Sequence[CyborgArq] = ()
    schema: str = "b47c8f2d1e3a"  # the alembic revision of Cyborg's schema


def pci_address(info: str | None) -> str | None:
    """Cyborg's JSON PCI address (``{"domain": "0000", "bus": "0c", "device": "0",
    "function": "1"}``, hex digits, padded or not) in canonical form; None if it is not
    one."""
    try:
        bdf = json.loads(info or "")
        domain, bus, dev, fn = (
            int(str(bdf[k]), 16) for k in ("domain", "bus", "device", "function")
        )
    except (ValueError, TypeError, KeyError):
        return None
    if not (0 <= bus < 0x100 and 0 <= dev < 0x20 and 0 <= fn < 8 and 0 <= domain < 1 << 32):
        return None
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"


def _groups(profile_json: str | None) -> list[dict[str, str]] | None:
    try:
        groups = json.loads(profile_json or "")["groups"]
    except (ValueError, TypeError, KeyError):
        return None
    if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
        return None
    return [{str(k): str(v) for k, v in g.items()} for g in groups]


# Cyborg's tables, the columns read (Core, no models: the schema is Cyborg's).
_C_VERSION = table("alembic_version", column("version_num"))
_C_DEVICES = table("devices", column("id"), column("uuid"), column("hostname"))
_C_CPIDS = table("controlpath_ids", column("device_id"), column("cpid_info"), column("id"))
_C_DEPLOYABLES = table(
    "deployables",
    column("id"),
    column("uuid"),
    column("name"),
    column("device_id"),
    column("rp_uuid"),
)
_C_ATTRIBUTES = table("attributes", column("deployable_id"), column("key"), column("value"))
_C_HANDLES = table(
    "attach_handles", column("id"), column("uuid"), column("deployable_id"), column("attach_info")
)
_C_PROFILES = table(
    "device_profiles",
    column("id"),
    column("uuid"),
    column("name"),
    column("description"),
    column("profile_json"),
)
_C_ARQS = table(
    "extended_accelerator_requests",
    column("id"),
    column("uuid"),
    column("state"),
    column("project_id"),
    column("device_profile_id"),
    column("device_profile_group_id"),
    column("hostname"),
    column("device_rp_uuid"),
    column("instance_uuid"),
    column("attach_handle_id"),
    column("created_at"),
    column("updated_at"),
)


def read_cyborg(url: str) -> Cyborg:
    """Cyborg's devices, deployables, attach handles, profiles and requests, read in one
    transaction from its database at ``url``, which is never written (nor created: a
    SQLite file that does not exist is refused)."""
    try:
        parsed = make_url(url)
        _check_sqlite_file(parsed.get_backend_name(), parsed.database)
        engine = create_engine(parsed)
    except (ArgumentError, ImportError, ValueError) as error:
        raise InvalidInput(
            f"Cyborg's database: {_hidden(url)} is not a database URL: {error}"
        ) from error
    try:
        with engine.connect() as conn:
            schema = _schema(conn)
            return dataclasses.replace(_read_cyborg(conn), schema=schema)
    except SQLAlchemyError as error:
        raise InvalidInput(
            f"Cannot read Cyborg's database: {getattr(error, 'orig', None) or error}"
        ) from error
    finally:
        engine.dispose()


def _hidden(url: str) -> str:
    """The URL with its password hidden (messages end up in logs and terminals)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return "the URL given"


def _check_sqlite_file(backend: str, database: str | None) -> None:
    """SQLite creates a file it is asked to open: a mistyped path would become an empty
    database, and the adoption would then report missing tables."""
    if backend != "sqlite" or not database or database == ":memory:":
        return
    if database.startswith("file:"):  # a URI; its path is before any query
        database = database[len("file:") :].split("?")[0]
    if not Path(database).is_file():
        raise InvalidInput(
            f"Cyborg's database: the SQLite file {database} does not exist (nothing was created)."
        )


def _schema(conn: Connection) -> str:
    """Cyborg's schema revision, refused unless this release reads it."""
    try:
        found = conn.execute(select(_C_VERSION.c.version_num)).scalars().all()
    except SQLAlchemyError as error:
        raise InvalidInput(
            "Cyborg's database has no alembic_version table: it is not a Cyborg database, "
            f"or its schema was never made (cyborg-dbsync upgrade). ({error.__class__.__name__})"
        ) from error
    supported = ", ".join(f"{rev} ({what})" for rev, what in SCHEMAS.items())
    if len(found) == 1 and found[0] in SCHEMAS:
        return str(found[0])
    revision = ", ".join(map(str, found)) or "none"
    if len(found) == 1 and found[0] in OLDER_SCHEMAS:
        raise InvalidInput(
            f"Cyborg's schema is at revision {revision}, which this release does not read "
            f"(it reads {supported}): upgrade Cyborg to release 11 or later, or finish its "
            "upgrade (cyborg-dbsync upgrade), then adopt it."
        )
    raise InvalidInput(
        f"Cyborg's schema is at revision {revision}, which this release does not know: it "
        f"reads {supported}. A newer Cyborg needs a newer Acceleron to adopt it."
    )


def _read_cyborg(conn: Connection) -> Cyborg:
    cpids: dict[int, str | None] = {}
    for row in conn.execute(select(_C_CPIDS).order_by(_C_CPIDS.c.id)):
        cpids.setdefault(row.device_id, pci_address(row.cpid_info))
    devices = [
        CyborgDevice(r.id, r.uuid, r.hostname, cpids.get(r.id))
        for r in conn.execute(select(_C_DEVICES).order_by(_C_DEVICES.c.id))
    ]
    classes = {
        r.deployable_id: r.value
        for r in conn.execute(select(_C_ATTRIBUTES).where(_C_ATTRIBUTES.c.key == "rc"))
    }
    deployables = [
        CyborgDeployable(r.id, r.uuid, r.name, r.device_id, r.rp_uuid, classes.get(r.id))
        for r in conn.execute(select(_C_DEPLOYABLES).order_by(_C_DEPLOYABLES.c.id))
    ]
    handles = [
        CyborgHandle(r.id, r.uuid, r.deployable_id, pci_address(r.attach_info))
        for r in conn.execute(select(_C_HANDLES).order_by(_C_HANDLES.c.id))
    ]
    profiles = [
        CyborgProfile(r.id, r.uuid, r.name, r.description, _groups(r.profile_json))
        for r in conn.execute(select(_C_PROFILES).order_by(_C_PROFILES.c.id))
    ]
    requests = [
        CyborgArq(
            r.uuid,
            r.state,
            r.project_id,
            r.device_profile_id,
            r.device_profile_group_id,
            r.hostname,
            r.device_rp_uuid,
            r.instance_uuid,
            r.attach_handle_id,
            r.created_at,
            r.updated_at,
        )
        for r in conn.execute(select(_C_ARQS).order_by(_C_ARQS.c.id))
    ]
    return Cyborg(devices, deployables, handles, profiles, requests)
