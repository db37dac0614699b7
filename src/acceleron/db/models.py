"""The only table definitions (SQLAlchemy 2.0 declarative).

Every schema change is an Alembic migration under ``db/migrations/versions``;
``tests/functional/test_migrations.py`` checks the migrations produce exactly
these tables on SQLite, PostgreSQL and MariaDB.

Shape (spec 003 for the deployables tree and its attributes):
hosts 1-n devices 1-n deployables (a tree through parent_id/root_id)
deployables 1-n attributes (nested through parent_id) and 1-n attach_handles;
device_profiles 1-n accelerator_requests n-1 attach_handles; bitstreams; tasks.

Enumerations are stored as short strings checked in code, not database ENUMs:
adding a value must not need a migration on three backends.
"""

from __future__ import annotations

import datetime as dt
from typing import Any, cast

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from acceleron import vocabulary

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# Column widths of what hosts report come from the vocabulary (and the report is
# checked against them); other widths are stated here.
UUID_LEN = vocabulary.UUID_LEN
NAME_LEN = vocabulary.NAME_LEN
W = vocabulary.WIDTHS
# Microseconds on every backend (MariaDB's DATETIME drops them unless told).
Timestamp = DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


# Every table on MariaDB/MySQL: full Unicode, and binary collation so that names
# compare case-sensitively as they do on PostgreSQL and SQLite.
MYSQL_OPTS = {"mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}


def table_args(*items: Any) -> tuple[Any, ...]:
    return (*items, MYSQL_OPTS)


def utcnow() -> dt.datetime:
    """Naive UTC: the same value on every backend (MariaDB DATETIME has no zone)."""
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class TimestampMixin:
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[dt.datetime | None] = mapped_column(Timestamp, onupdate=utcnow)


class Host(TimestampMixin, Base):
    """A compute host that runs an agent, and what it last reported."""

    __tablename__ = "hosts"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    hostname: Mapped[str] = mapped_column(String(W["hostname"]), unique=True)
    # Placement resource provider of the compute node this host is.
    rp_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    agent_version: Mapped[str | None] = mapped_column(String(W["agent_version"]))
    # Digest of the last report applied: an identical report is a no-op.
    report_digest: Mapped[str | None] = mapped_column(String(64))
    last_report_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # Bumped on each inventory change; Placement sync compares it with synced_generation.
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    synced_generation: Mapped[int] = mapped_column(BigInteger, default=-1)
    # Why the last sync left devices out of Placement (empty: it published them all).
    placement_errors: Mapped[list[Any]] = mapped_column(default=list)
    # The task format its agent last claimed tasks with ("1.2"): whether it cleans.
    task_format: Mapped[str | None] = mapped_column(String(16))
    # Which API process publishes its pending change to Placement (a token), and until
    # when (the database's time): one at a time (publish.Syncer.sync_pending).
    sync_owner: Mapped[str | None] = mapped_column(String(32))
    sync_until: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # What that sync published, as a claim's view reads it (service.claim_view.published):
    # the generation published, and each provider with accelerators.
    published: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class Device(TimestampMixin, Base):
    """One physical card, keyed by host and PCI address."""

    __tablename__ = "devices"
    __table_args__ = table_args(
        UniqueConstraint("hostname", "pci_address"),
        # A claim's survey walks the devices of a type in uuid order from a random
        # point: a few hosts at random without reading every host's devices.
        Index(None, "type", "uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    hostname: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    pci_address: Mapped[str] = mapped_column(String(W["pci_address"]))
    type: Mapped[str] = mapped_column(String(W["type"]))  # FPGA, GPU, QAT, AICHIP, ...
    # PCI vendor id, e.g. "8086"
    vendor: Mapped[str] = mapped_column(String(W["vendor_id"]), index=True)
    # e.g. "INTEL", used in traits
    vendor_name: Mapped[str] = mapped_column(String(W["vendor_name"]))
    product_id: Mapped[str] = mapped_column(String(W["product_id"]))
    model: Mapped[str] = mapped_column(String(W["model"]))  # product / family, e.g. "PAC_ARRIA10"
    driver_name: Mapped[str] = mapped_column(String(W["driver"]))
    std_board_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    vendor_board_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    numa_node: Mapped[int | None] = mapped_column(Integer)
    # Its nearest PCIe switch (the bridge's PCI address) and the NVLink domain it is in
    # (a name its NVLink peers share); None: none, or unknown (expand_0005).
    pcie_switch: Mapped[str | None] = mapped_column(String(W["pci_address"]))
    nvlink_domain: Mapped[str | None] = mapped_column(String(64))
    # Operator switch (upstream 2.3): "enabled" or "maintaining".
    status: Mapped[str] = mapped_column(String(16), default="enabled")
    # Agent's view: "present", or "lost" when it vanished while in use.
    state: Mapped[str] = mapped_column(String(16), default="present")
    # The driver's verdict: healthy, degraded or unhealthy; why; since when (first seen).
    health: Mapped[str] = mapped_column(String(16), default="healthy")
    health_reason: Mapped[str | None] = mapped_column(Text)
    health_since: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # Why and since when an operator has it in maintenance (status "maintaining").
    maintenance_reason: Mapped[str | None] = mapped_column(String(NAME_LEN))
    maintenance_since: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Deployable(TimestampMixin, Base):
    """A node of a device's tree: the device itself, a region, a VF pool, a vGPU type..."""

    __tablename__ = "deployables"
    __table_args__ = table_args(
        UniqueConstraint("device_id", "key"),
        # The regions holding a function, walked in uuid order from a random point by a
        # claim's survey (a few hosts at random, not every holder).
        Index(None, "function_key", "uuid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("deployables.id"))
    root_id: Mapped[int | None] = mapped_column(ForeignKey("deployables.id"))
    # Stable id inside the device (e.g. "region0", "vgpu/nvidia-222"): the diff key.
    key: Mapped[str] = mapped_column(String(W["key"]))
    name: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    # device, region, vf_pool, vgpu_type, mig_profile, mig_gpu
    kind: Mapped[str] = mapped_column(String(W["kind"]))
    num_accelerators: Mapped[int] = mapped_column(Integer, default=0)
    # What it accelerates (GPU, VGPU, MIG...; None: the device's type), for the class.
    accelerator_type: Mapped[str | None] = mapped_column(String(W["accelerator_type"]))
    programmable: Mapped[bool] = mapped_column(Boolean, default=False)
    memory_mb: Mapped[int | None] = mapped_column(Integer)
    # The kind of that memory (DDR, HBM, GDDR...), naming its resource class; None: unknown.
    memory_type: Mapped[str | None] = mapped_column(String(32))
    # The resource class Placement sync last published it as.
    resource_class: Mapped[str | None] = mapped_column(String(NAME_LEN))
    traits: Mapped[list[Any]] = mapped_column(default=list)
    rp_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    driver_name: Mapped[str] = mapped_column(String(W["driver"]))
    bitstream_id: Mapped[str | None] = mapped_column(String(W["bitstream_id"]))
    region_type: Mapped[str | None] = mapped_column(String(W["region_type"]))
    # the first of function_uuids
    function_uuid: Mapped[str | None] = mapped_column(String(W["function_uuids"]))
    # function_uuid as traits spell it (weigher.fold_function): what claims look it up by
    function_key: Mapped[str | None] = mapped_column(String(W["function_uuids"]))
    # Every function it implements (AFU ids, in the driver's order); spec 004 wants a trait each.
    function_uuids: Mapped[list[Any]] = mapped_column(default=list)
    # Whether it holds several functions (tree.functions): claims read these few regions
    # one by one, since function_key finds the first alone.
    several_functions: Mapped[bool] = mapped_column(Boolean, default=False, index=True)
    # Spec 003: whether it can be handed to users, its availability and its instance.
    assignable: Mapped[bool] = mapped_column(Boolean, default=True)
    availability: Mapped[str] = mapped_column(String(16), default="available")
    instance_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    # Programming in progress: phase and percentage, shown to operators.
    program_phase: Mapped[str | None] = mapped_column(String(32))
    program_progress: Mapped[int | None] = mapped_column(Integer)
    program_error: Mapped[str | None] = mapped_column(Text)
    # What Acceleron loaded into it, for whom and how verified (service/provenance.py);
    # None: nothing Acceleron loaded, what it holds came from outside (expand_0002).
    provenance: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # How many of its handles are not clean (given back, cleaning or failed to): what
    # Placement holds reserved (service/cleaning.py).
    cleaning: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Health of the deployable itself (a region whose port failed, a MIG profile whose GPU
    # instance did); the device's own health applies to it as well.
    health: Mapped[str] = mapped_column(String(16), default="healthy")
    health_reason: Mapped[str | None] = mapped_column(Text)
    health_since: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # Operator maintenance of this deployable alone: "enabled" or "maintaining".
    status: Mapped[str] = mapped_column(String(16), default="enabled")
    maintenance_reason: Mapped[str | None] = mapped_column(String(NAME_LEN))
    maintenance_since: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Attribute(TimestampMixin, Base):
    """A key/value pair of a deployable; nested through parent_id (spec 003)."""

    __tablename__ = "attributes"
    __table_args__ = table_args(Index(None, "deployable_id", "key"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    deployable_id: Mapped[int] = mapped_column(ForeignKey("deployables.id", ondelete="CASCADE"))
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("attributes.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(NAME_LEN))
    value: Mapped[str | None] = mapped_column(Text)
    # "agent": from its host's reports, which own it; "operator": POST /v2/attributes.
    source: Mapped[str] = mapped_column(String(16), default="agent")


class AttachHandle(TimestampMixin, Base):
    """What is attached to a workload: a PCI function, an mdev, a MIG instance."""

    __tablename__ = "attach_handles"
    __table_args__ = table_args(
        UniqueConstraint("deployable_id", "address"),
        Index(None, "deployable_id", "in_use"),
        # A deployable's free handles: without it SQLite walks every free handle of
        # every host through the arq_id index (20,000 at 1,000 hosts) on each bind.
        Index(None, "deployable_id", "arq_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    deployable_id: Mapped[int] = mapped_column(ForeignKey("deployables.id", ondelete="CASCADE"))
    type: Mapped[str] = mapped_column(String(16))  # PCI, MDEV, MIG, TEST_PCI
    address: Mapped[str] = mapped_column(String(W["address"]))  # BDF, mdev uuid or MIG uuid
    attach_info: Mapped[dict[str, Any]] = mapped_column(default=dict)
    in_use: Mapped[bool] = mapped_column(Boolean, default=False)
    # Busy on the host outside Acceleron (the driver says so, e.g. an existing mdev).
    host_in_use: Mapped[bool] = mapped_column(Boolean, default=False)
    # The ARQ holding it; unique so one handle can never serve two requests.
    arq_id: Mapped[int | None] = mapped_column(
        ForeignKey("accelerator_requests.id", ondelete="SET NULL"), unique=True
    )
    state: Mapped[str] = mapped_column(String(16), default="present")  # present, lost
    # None: it may be handed out; waiting, cleaning or failed: not (service/cleaning.py).
    cleaning: Mapped[str | None] = mapped_column(String(16))
    # The driver's verdict on this handle alone (the GPU instance in one slot of a GPU
    # carved on demand): an unhealthy one is handed out to no request (expand_0007).
    health: Mapped[str] = mapped_column(String(16), default="healthy", server_default="healthy")
    health_reason: Mapped[str | None] = mapped_column(Text)


class DeviceProfile(TimestampMixin, Base):
    """A named, ordered list of request groups (spec 002)."""

    __tablename__ = "device_profiles"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    description: Mapped[str | None] = mapped_column(String(NAME_LEN))
    groups: Mapped[list[Any]] = mapped_column()
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class AcceleratorRequest(TimestampMixin, Base):
    """One requested accelerator (an ARQ) and its binding."""

    __tablename__ = "accelerator_requests"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    state: Mapped[str] = mapped_column(String(16), index=True)
    project_id: Mapped[str | None] = mapped_column(String(NAME_LEN), index=True)
    device_profile_id: Mapped[int] = mapped_column(
        ForeignKey("device_profiles.id", ondelete="RESTRICT")
    )
    device_profile_group_id: Mapped[int] = mapped_column(Integer)
    hostname: Mapped[str | None] = mapped_column(String(NAME_LEN))
    # The provider it was allocated on: a claim's view counts what each one holds.
    device_rp_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    instance_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    deployable_id: Mapped[int | None] = mapped_column(
        ForeignKey("deployables.id", ondelete="SET NULL")
    )
    bind_started_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    # Phase of a bind in progress (allocate, fetch, verify, program, ...) and progress.
    phase: Mapped[str | None] = mapped_column(String(32))
    progress: Mapped[int | None] = mapped_column(Integer)
    failure_reason: Mapped[str | None] = mapped_column(Text)
    # The resource class of the accelerator it asks for, what a project's quota counts.
    resource_class: Mapped[str | None] = mapped_column(String(NAME_LEN))


class Bitstream(TimestampMixin, Base):
    """Metadata of a bitstream in the local store (the files are content-addressed)."""

    __tablename__ = "bitstreams"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    size: Mapped[int] = mapped_column(BigInteger)
    vendor: Mapped[str | None] = mapped_column(String(64))
    function_uuid: Mapped[str | None] = mapped_column(String(64), index=True)
    function_name: Mapped[str | None] = mapped_column(String(NAME_LEN), index=True)
    region_type_uuid: Mapped[str | None] = mapped_column(String(64), index=True)
    properties: Mapped[dict[str, Any]] = mapped_column(default=dict)
    owner: Mapped[str | None] = mapped_column(String(NAME_LEN))
    visibility: Mapped[str] = mapped_column(String(16), default="public")
    status: Mapped[str] = mapped_column(String(16), default="active")


class Task(TimestampMixin, Base):
    """Work handed to a host's agent (program a region, create an mdev, ...)."""

    __tablename__ = "tasks"
    __table_args__ = table_args(Index(None, "hostname", "state"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    hostname: Mapped[str] = mapped_column(String(NAME_LEN))
    kind: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16), default="pending")
    phase: Mapped[str | None] = mapped_column(String(32))
    progress: Mapped[int | None] = mapped_column(Integer)
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    arq_id: Mapped[int | None] = mapped_column(
        ForeignKey("accelerator_requests.id", ondelete="SET NULL")
    )
    deployable_id: Mapped[int | None] = mapped_column(
        ForeignKey("deployables.id", ondelete="SET NULL")
    )


class InstanceBinding(Base):
    """One row per instance with bound accelerator requests: the unique instance uuid
    makes a second, racing bind of the same instance fail in the database."""

    __tablename__ = "instance_bindings"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    instance_uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow)


class Claim(TimestampMixin, Base):
    """A server-side claim (``POST /v2/claims``): a consumer's accelerators, allocated in
    Placement and bound by the API. States: docs/claims.md."""

    __tablename__ = "claims"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    consumer: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    project_id: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    device_profile_name: Mapped[str] = mapped_column(String(NAME_LEN))
    state: Mapped[str] = mapped_column(String(16), index=True)
    hostname: Mapped[str | None] = mapped_column(String(NAME_LEN))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    # What it allocated: provider uuid -> resource class -> amount (null before 0011).
    # While ``allocating``, from step ``placing`` on: what it asks Placement for.
    allocations: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # How far a claim being made (or released) got, and who does it (0015): the step
    # reached (begun, placing, created; done once established), the uuids of the
    # requests it created, the process at work on it and until when it may be.
    step: Mapped[str | None] = mapped_column(String(16))
    requests: Mapped[list[Any] | None] = mapped_column(JSON)
    owner: Mapped[str | None] = mapped_column(String(NAME_LEN))
    lease_until: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Tenancy(Base):
    """One tenancy of an attach handle, once given back: who held it, what its region held
    then, and how and when it was cleaned (a device's history, service/tenancies.py)."""

    __tablename__ = "tenancies"
    __table_args__ = table_args(Index(None, "device_id", "released_at"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    device_id: Mapped[int] = mapped_column(ForeignKey("devices.id", ondelete="CASCADE"))
    deployable_id: Mapped[int | None] = mapped_column(
        ForeignKey("deployables.id", ondelete="SET NULL")
    )
    deployable: Mapped[str] = mapped_column(String(W["key"]))  # its key, kept if it goes
    handle: Mapped[str] = mapped_column(String(W["address"]))
    project_id: Mapped[str | None] = mapped_column(String(NAME_LEN))
    instance_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN))
    arq_uuid: Mapped[str] = mapped_column(String(UUID_LEN))
    bound_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    released_at: Mapped[dt.datetime] = mapped_column(Timestamp, index=True)
    held: Mapped[dict[str, Any] | None] = mapped_column(JSON)  # its region's provenance
    method: Mapped[str] = mapped_column(String(16))  # none, reset, scrub, command
    # pending, done, failed; skipped (method none, or an agent that cannot clean)
    cleaning: Mapped[str] = mapped_column(String(16))
    task_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN), index=True)
    cleaned_at: Mapped[dt.datetime | None] = mapped_column(Timestamp)
    cleaning_seconds: Mapped[float | None] = mapped_column(Float)
    cleaning_error: Mapped[str | None] = mapped_column(Text)


class QuotaProject(Base):
    """One row per project whose accelerators are counted against its limits: a bind
    takes its project's row (a row lock) before it counts, so that two racing binds of
    one project count one after the other and never exceed a limit together."""

    __tablename__ = "quota_projects"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[str] = mapped_column(String(NAME_LEN), unique=True)
    generation: Mapped[int] = mapped_column(BigInteger, default=0)


class PlacementProvider(TimestampMixin, Base):
    """A resource provider Acceleron owns in Placement, as it last wrote it.

    The record lets a re-sync skip every provider whose generation and content
    are what Acceleron left there, and limits Acceleron to its own providers.
    """

    __tablename__ = "placement_providers"
    __table_args__ = table_args()

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(UUID_LEN), unique=True)
    hostname: Mapped[str] = mapped_column(String(NAME_LEN), index=True)
    name: Mapped[str] = mapped_column(String(NAME_LEN))
    parent_uuid: Mapped[str | None] = mapped_column(String(UUID_LEN))
    generation: Mapped[int] = mapped_column(BigInteger)
    digest: Mapped[str] = mapped_column(String(64))
    # No longer wanted, kept with everything reserved while allocations remain.
    retired: Mapped[bool] = mapped_column(Boolean, default=False)
    # Flat mode: the resource classes and traits Acceleron added to the compute node.
    owned: Mapped[dict[str, Any]] = mapped_column(default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    # Until when claims ask Placement's candidate query about it rather than trust
    # Acceleron's view of it (the database's time; service.claim_view.mark_stale).
    stale_until: Mapped[dt.datetime | None] = mapped_column(Timestamp)


class Adopted(Base):
    """One object of Cyborg's that ``acceleron adopt cyborg`` took over (service/adopt.py):
    a device profile, an accelerator request, a provider of Cyborg's (as Placement had it
    before the adoption first changed it) or a server's allocation (as it was on Cyborg's
    providers). A later run adopts only what is not here, and the way back reads what
    Cyborg's providers and allocations were."""

    __tablename__ = "adopted"
    __table_args__ = table_args(UniqueConstraint("kind", "uuid"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # device_profile, accelerator_request, provider, allocation (its consumer's uuid)
    kind: Mapped[str] = mapped_column(String(32))
    uuid: Mapped[str] = mapped_column(String(UUID_LEN))
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[dt.datetime] = mapped_column(Timestamp, default=utcnow)


class Lease(Base):
    """Work that one API process of a region does at a time (``service.leases``): the
    process holding it (a token new for each process) and until when (the database's
    time); another process takes it once that has passed."""

    __tablename__ = "leases"
    __table_args__ = table_args()

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    owner: Mapped[str] = mapped_column(String(32))
    until: Mapped[dt.datetime] = mapped_column(Timestamp)


def table(model: type[Base]) -> Table:
    """A model's Core table: what service code writes its statements against."""
    return cast(Table, model.__table__)
