"""What a region holds, where it came from, and who may use it as it is.

A region's ``provenance`` (a JSON column of ``deployables``) is written when Acceleron
loads something into it, by the end of the program task (``loaded``):

* ``bitstream_id``: the bitstream loaded;
* ``project_id``: the project of the request that loaded it (None: an admin's program,
  outside any request);
* ``functions``: the functions it brought (folded as ``fold_uuid`` spells them);
* ``signature``: ``{"verified": true, "certificate_id": ...}`` when the agent verified
  its signature over the bytes it programmed, ``{"verified": false, "reason": ...}``
  otherwise (unsigned, or a signature that did not verify where none was required);
* ``loaded_at``.

Null: Acceleron loaded nothing there, and what the region holds (a function its driver
reports) was loaded outside it, by its operator or by whoever had the host.

A request for a function (or a bitstream) that a region holds already binds to it as it
is only where the request's project could have loaded that image itself
(:func:`refusal`): a bitstream it may see (public, or its own), verified where its
project requires signatures (``[bitstreams] verify_signatures`` and
``require_signatures_projects``, which the API reads as the agents do), and no program
of another image under way. An image loaded outside Acceleron counts only when its
operator vouches for every function it holds (``[bitstreams] trusted_functions``).
Where what the region reports no longer matches the record (an agent's report from
before the program, or an image changed by hand since), nothing is reused: the region is
programmed again with a bitstream the project may use, or the request is refused with
the reason. Reasons name no other project and no bitstream the caller may not see.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from oslo_config import cfg

from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.model import fold_uuid
from acceleron.db.models import utcnow
from acceleron.exceptions import BitstreamNotFound

# A program under way: what the region holds is about to change.
PROGRAMMING = ("queued", "fetch", "verify", "program")


@dataclasses.dataclass(frozen=True)
class Trust:
    """The API's half of the rules: which projects run only verified images, and which
    functions found loaded outside Acceleron its operator vouches for (folded)."""

    verify_all: bool = False
    signed_projects: frozenset[str] = frozenset()
    trusted_functions: frozenset[str] = frozenset()

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Trust:
        section = conf.bitstreams
        return cls(
            verify_all=section.verify_signatures,
            signed_projects=frozenset(section.require_signatures_projects),
            trusted_functions=frozenset(fold_uuid(f) for f in section.trusted_functions),
        )

    def requires_signature(self, project: str) -> bool:
        return self.verify_all or project in self.signed_projects


DEFAULT = Trust()  # nothing required, nothing loaded outside Acceleron trusted


def loaded(
    params: Mapping[str, Any], result: Mapping[str, Any], functions: Iterable[str]
) -> dict[str, Any]:
    """The record of a program task that ended well: its ``params`` (the bitstream, the
    request's project), the agent's ``result`` (the signature check) and the
    ``functions`` the region now holds."""
    bitstream = params.get("bitstream") or {}
    signature = result.get("signature")
    if not isinstance(signature, Mapping) or signature.get("verified") is not True:
        reason = signature.get("reason") if isinstance(signature, Mapping) else None
        signature = {"verified": False, "reason": str(reason or "not checked")}
    else:
        signature = {"verified": True, "certificate_id": signature.get("certificate_id")}
    return {
        "bitstream_id": result.get("bitstream_id") or bitstream.get("id"),
        "project_id": params.get("project_id"),
        "functions": sorted({fold_uuid(f) for f in functions}),
        "signature": signature,
        "loaded_at": utcnow().isoformat(),
    }


def held_functions(region: Any) -> set[str]:
    """The functions a region reports now, folded."""
    listed = region.function_uuids or ([region.function_uuid] if region.function_uuid else [])
    return {fold_uuid(f) for f in listed if f}


def refusal(region: Any, project: str, store: BitstreamStore | None, trust: Trust) -> str | None:
    """None when a request of ``project`` may use what ``region`` holds as it is; else
    why not, for that project to read."""
    if region.program_phase in PROGRAMMING:
        return "another image is being programmed into it"
    held = held_functions(region)
    record = region.provenance
    if not record:
        if held and held <= trust.trusted_functions:
            return None
        return (
            "what it holds was loaded outside Acceleron and its operator has not marked "
            "it trusted ([bitstreams] trusted_functions)"
        )
    if not held or not held <= set(record.get("functions") or ()):
        return "what it reports holding is not what Acceleron loaded into it"
    return _refusal_of_loaded(record, project, store, trust)


def _refusal_of_loaded(
    record: Mapping[str, Any], project: str, store: BitstreamStore | None, trust: Trust
) -> str | None:
    if store is None:
        return "no bitstream store is configured to check what it holds against"
    try:
        store.get(str(record.get("bitstream_id")), project)
    except BitstreamNotFound:
        return "it holds an image loaded from a bitstream your project may not use"
    verified = (record.get("signature") or {}).get("verified") is True
    if trust.requires_signature(project) and not verified:
        return "its image's signature was not verified, and your project runs only verified images"
    return None


def describe(region: Any, trust: Trust) -> dict[str, Any] | None:
    """Where what ``region`` holds came from, for its readers: the record, with its
    ``source``; what was loaded outside Acceleron, with whether its operator trusts it;
    None when it holds no function."""
    held = held_functions(region)
    record = region.provenance
    loaded = set(record.get("functions") or ()) if record else set()
    if record and held <= loaded and (held or not loaded):
        return {"source": "acceleron", **record}
    if not held:
        return None
    trusted = not record and held <= trust.trusted_functions
    return {"source": "outside", "functions": sorted(held), "trusted": trusted}
