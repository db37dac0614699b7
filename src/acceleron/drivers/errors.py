"""Errors the drivers raise on purpose. Discovery raises none for a bad device (it is
skipped and logged); these come from configuration, loading and programming."""

from __future__ import annotations

from acceleron.exceptions import AcceleronError, InvalidInput, NotFound


class DriverError(AcceleronError):
    """Base class of the drivers' errors."""


class DriverConfigError(DriverError, InvalidInput):
    """A driver option or file is invalid: an unknown driver name, a bad device_spec,
    a malformed fake inventory."""


class BitstreamError(DriverError, InvalidInput):
    """The bitstream is unreadable, malformed, or does not fit the region."""


class TargetNotFound(DriverError, NotFound):
    """The device or region to program is not (or no longer) on this host."""


class ProgrammingError(DriverError):
    """The programming tool failed, timed out or is not installed."""


class CleaningUnsupported(DriverError):
    """The hardware (or this driver) allows no such cleaning of the device here."""
