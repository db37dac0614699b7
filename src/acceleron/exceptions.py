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


class DuplicateName(Conflict):
    """An object with that name or uuid already exists."""


class InUse(Conflict):
    """The object is used by others and cannot be changed that way."""


class Disabled(Conflict):
    """The object is disabled and cannot be used for new work."""


class Forbidden(AcceleronError):
    """The caller may not do this."""


class Locked(AcceleronError):
    """The answer is not ready yet (a bind is still in progress)."""


class SchemaOutOfDate(AcceleronError):
    """The database schema is older than this code; ``acceleron db upgrade`` is needed."""
