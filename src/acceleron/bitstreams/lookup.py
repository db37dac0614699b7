"""Choosing the one bitstream a request names (spec 000, ``plug()``; spec 002 accel keys).

Choosing among several candidates is a policy Acceleron leaves to the operator
(spec 000): zero matches is BitstreamNotFound, more than one is
AmbiguousBitstream, and its message lists every match by id and name so the
catalogue can be put right.
"""

from __future__ import annotations

from collections.abc import Sequence

from acceleron.bitstreams.model import Bitstream, fold_uuid
from acceleron.exceptions import AmbiguousBitstream, BitstreamNotFound, IncompatibleBitstream

# How many matches an ambiguity message lists before it only counts the rest.
LISTED_MAX = 20


def listing(bitstreams: Sequence[Bitstream]) -> str:
    shown = ", ".join(b.describe() for b in bitstreams[:LISTED_MAX])
    rest = len(bitstreams) - LISTED_MAX
    return shown + (f" and {rest} more" if rest > 0 else "")


def exactly_one(matches: Sequence[Bitstream], what: str) -> Bitstream:
    """The single match, or the domain error that says why there is not one."""
    if not matches:
        raise BitstreamNotFound(f"No bitstream matches {what}.")
    if len(matches) > 1:
        raise AmbiguousBitstream(
            f"{len(matches)} bitstreams match {what}: {listing(matches)}. Acceleron does not "
            f"choose between them: delete or re-label all but one, or name one by "
            f"accel:bitstream_id."
        )
    return matches[0]


def fits_region(bitstream: Bitstream, region_type: str | None) -> bool:
    """Whether a bitstream may go into a region of that type (an unknown side fits)."""
    if region_type is None or bitstream.region_type_uuid is None:
        return True
    return fold_uuid(bitstream.region_type_uuid) == fold_uuid(region_type)


def check_fits(bitstream: Bitstream, region_type: str | None) -> Bitstream:
    if not fits_region(bitstream, region_type):
        raise IncompatibleBitstream(
            f"Bitstream {bitstream.describe()} is built for region type "
            f"{bitstream.region_type_uuid}, not {region_type}."
        )
    return bitstream


def one_fitting(matches: Sequence[Bitstream], region_type: str | None, what: str) -> Bitstream:
    """Among bitstreams found by name, the one that fits the region type."""
    fitting = [b for b in matches if fits_region(b, region_type)]
    if matches and not fitting:
        raise IncompatibleBitstream(
            f"Bitstreams match {what}, but none is built for region type {region_type}: "
            f"{listing(matches)}."
        )
    return exactly_one(fitting, what + (f" for region type {region_type}" if region_type else ""))
