"""Domain exceptions.

They carry no HTTP status: ``acceleron.api.errors`` maps each class to a status
and a stable error code in one table. Messages are written for the operator
who reads them: say what was wrong and with which field or object.
"""

from __future__ import annotations


class AcceleronError(Exception):
    """Base class of every error Acceleron raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AcceleronError):
    """The request is malformed or violates a validation rule."""


class NotFound(AcceleronError):
    """The named object does not exist (or is not visible to the caller)."""


class Conflict(AcceleronError):
    """The request conflicts with the current state of an object."""


class NoCapacity(Conflict):
    """No host has what a claim's profile asks for free."""


class NotProvided(NoCapacity):
    """No host provides a resource class a claim's profile asks for at all."""


class NoMigPlacement(NoCapacity):
    """No GPU can take the MIG profile asked for. ``reason`` is one of
    ``acceleron.mig.geometry.REASONS`` (the mildest any GPU had: "enough slices but no
    valid position" before "too few free slices"); the message names the GPUs."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class DuplicateName(Conflict):
    """An object with that name or uuid already exists."""


class InUse(Conflict):
    """The object is used by others and cannot be changed that way."""


class Disabled(Conflict):
    """The object is disabled and cannot be used for new work."""


class Unhealthy(Conflict):
    """The device (or deployable) is unhealthy: nothing new may be bound to it."""


class InMaintenance(Conflict):
    """The device (or deployable) is in maintenance, and the request does not tolerate it."""


class Forbidden(AcceleronError):
    """The caller may not do this."""


class Locked(AcceleronError):
    """The answer is not ready yet (a bind is still in progress)."""


class DatabaseBusy(AcceleronError):
    """The database could not be written in time; the request may be retried."""


class DatabaseUnavailable(AcceleronError):
    """The database cannot be reached (or lost the connection); retry later."""


class Overloaded(AcceleronError):
    """No capacity came free in time to serve the request; retry shortly."""


class OverLimit(AcceleronError):
    """The caller's project reached a limit on concurrent work; retry when some ends."""


class ConfigError(AcceleronError):
    """A configuration option holds a value Acceleron cannot use; the message names it."""


class SchemaOutOfDate(AcceleronError):
    """The database schema is older than this code; ``acceleron db upgrade`` is needed."""


class UpgradeInProgress(AcceleronError):
    """Another schema upgrade holds the database's upgrade lock."""


class BitstreamNotFound(NotFound):
    """No bitstream matches the id, name or function asked for."""


class AmbiguousBitstream(Conflict):
    """More than one bitstream matches; the message lists them so the catalogue can be fixed."""


class IncompatibleBitstream(Conflict):
    """The bitstream named exists but is built for another region type."""


class BitstreamUnavailable(Conflict):
    """The bitstream has no data yet (still uploading) or is deactivated."""


class BitstreamCorrupt(AcceleronError):
    """The bytes read do not match the bitstream's recorded size or hash; the message
    gives the recorded and the actual hash."""


class BitstreamSignatureRefused(AcceleronError):
    """The bitstream's signature does not vouch for its bytes; ``reason`` is one of
    ``acceleron.bitstreams.signatures.REASONS``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class StateUnwritable(AcceleronError):
    """A directory this server keeps its own files in cannot be written (a read-only file
    system, its permissions): the server's configuration, not the caller's doing. The
    message names the directory and the option that sets it."""

    def __init__(self, directory: object, option: str, error: OSError) -> None:
        super().__init__(
            f"This server cannot write to {directory} ({error.strerror or error}): make "
            f"{option} a directory it may write (under systemd, the unit's StateDirectory= "
            f"or ReadWritePaths=), or point {option} at one."
        )


class BitstreamStoreError(AcceleronError):
    """The bitstream store (Glance or the local directory) failed to answer."""


class InvalidPlacementName(InvalidInput):
    """A driver's value cannot be turned into a valid Placement trait or resource class name.

    ``driver`` and ``device`` say where the value came from, so the operator knows which
    driver to fix or configure.
    """

    def __init__(self, message: str, *, driver: str, device: str, name: str) -> None:
        super().__init__(message)
        self.driver = driver
        self.device = device
        self.name = name


class PlacementError(AcceleronError):
    """Placement refused a request. ``status`` and ``code`` are Placement's own answer."""

    def __init__(self, message: str, *, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class PlacementUnavailable(PlacementError):
    """Placement could not be reached or answered 5xx: try again later, with backoff."""


class PlacementGenerationConflict(PlacementError):
    """A provider kept changing under our writes: every retry met a newer generation."""


class PlacementProviderNotFound(PlacementError):
    """The resource provider does not exist in Placement."""


class PlacementProviderExists(PlacementError):
    """A resource provider with that uuid or name already exists."""


class AllocationConflict(PlacementError):
    """Another consumer took the capacity (or changed this consumer) meanwhile: choose
    again."""


class PlacementProviderInUse(PlacementError):
    """The provider (or the inventory being removed) still has allocations or children."""


class UnsupportedFormat(Conflict):
    """An agent and this API speak no common major version of a report or task format."""


class UnknownHost(Conflict):
    """A host reports, but the compute service (Placement) knows no compute node by its name."""


class ReportUnknown(Conflict):
    """An agent says its report is unchanged, by a digest that is not the one of the host's
    last report here (another report came since, or the API forgot it): it sends the
    whole report."""


class QuotaExceeded(AcceleronError):
    """A project would hold more accelerators of a resource class than its limit allows.

    ``resource`` is the limit's name (``class:<RESOURCE_CLASS>``); ``limit``, ``usage``
    (what the project holds now) and ``requested`` (what the request adds) are counts.
    """

    def __init__(
        self, message: str, *, project: str, resource: str, limit: int, usage: int, requested: int
    ) -> None:
        super().__init__(message)
        self.project = project
        self.resource = resource
        self.limit = limit
        self.usage = usage
        self.requested = requested


class QuotaUnavailable(AcceleronError):
    """The limits cannot be read (Keystone, with ``[quota] driver = unified_limits``)."""
