"""The rules of ``service.provenance``: when what a region holds may be used as it is."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from acceleron.bitstreams import NewBitstream
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.local import LocalStore
from acceleron.db.session import Database
from acceleron.service import provenance
from acceleron.service.provenance import Trust

F, G = "aa" * 16, "bb" * 16


@pytest.fixture
def store(sqlite_db: Database, tmp_path: Path) -> BitstreamStore:
    return LocalStore(sqlite_db, tmp_path / "bitstreams")


def add(store: BitstreamStore, owner: str, visibility: str = "private") -> str:
    meta = NewBitstream(name="x.gbs", function_uuid=F, owner=owner, visibility=visibility)
    return store.upload(io.BytesIO(owner.encode()), meta).id


def region(functions: list[str], record: dict[str, Any] | None, phase: str | None = None) -> Any:
    first = functions[0] if functions else None
    return SimpleNamespace(
        function_uuids=functions, function_uuid=first, provenance=record, program_phase=phase
    )


def loaded(bitstream: str, project: str | None, verified: bool, functions: list[str]) -> Any:
    params = {"bitstream": {"id": bitstream}, "project_id": project}
    result = {
        "signature": {"verified": verified, "certificate_id": "c1"}
        if verified
        else {"verified": False, "reason": "unsigned"}
    }
    return provenance.loaded(params, result, functions)


def test_the_record_of_a_program(store: BitstreamStore) -> None:
    record = loaded("b1", "q", True, [F.upper(), F])
    assert record["functions"] == [F] and record["project_id"] == "q"
    assert record["signature"] == {"verified": True, "certificate_id": "c1"}
    # An agent that said nothing of the signature: not verified.
    assert provenance.loaded({}, {}, [F])["signature"] == {
        "verified": False,
        "reason": "not checked",
    }


def test_what_a_project_may_see_it_may_use_as_it_is(store: BitstreamStore) -> None:
    private, public = add(store, "q"), add(store, "q", "public")
    mine = region([F], loaded(private, "q", False, [F]))
    assert provenance.refusal(mine, "q", store, Trust()) is None
    assert "may not use" in (provenance.refusal(mine, "p", store, Trust()) or "")
    assert "may not use" in (provenance.refusal(mine, "", store, Trust()) or "")
    shared = region([F], loaded(public, "q", False, [F]))
    assert provenance.refusal(shared, "p", store, Trust()) is None
    signed_only = Trust(signed_projects=frozenset({"p"}))
    assert "not verified" in (provenance.refusal(shared, "p", store, signed_only) or "")
    assert "not verified" in (provenance.refusal(shared, "q", store, Trust(verify_all=True)) or "")
    verified = region([F], loaded(public, "q", True, [F]))
    assert provenance.refusal(verified, "p", store, signed_only) is None
    assert "no bitstream store" in (provenance.refusal(verified, "p", None, Trust()) or "")


def test_a_record_that_does_not_explain_what_the_region_reports_is_not_used(
    store: BitstreamStore,
) -> None:
    public = add(store, "q", "public")
    trusting = Trust(trusted_functions=frozenset({F, G}))
    # A report from before the program (or a change by hand): even a trusted function.
    stale = region([G], loaded(public, "q", True, [F]))
    assert "not what Acceleron loaded" in (provenance.refusal(stale, "q", store, trusting) or "")
    # Fewer functions than the image brought (a driver naming the first alone) is fine.
    assert (
        provenance.refusal(region([F], loaded(public, "q", True, [F, G])), "q", store, Trust())
        is None
    )
    assert (
        provenance.refusal(region([], loaded(public, "q", True, [F])), "q", store, Trust())
        is not None
    )


def test_an_image_from_outside_counts_only_if_every_function_is_trusted() -> None:
    found = region([F, G], None)
    assert "outside Acceleron" in (provenance.refusal(found, "q", None, Trust()) or "")
    half = Trust(trusted_functions=frozenset({F}))
    assert provenance.refusal(found, "q", None, half) is not None
    both = Trust(trusted_functions=frozenset({F, G}))
    assert provenance.refusal(found, "q", None, both) is None
    assert provenance.describe(found, both) == {
        "source": "outside",
        "functions": [F, G],
        "trusted": True,
    }
    assert provenance.describe(region([], None), both) is None


def test_nothing_is_used_while_another_image_goes_in(store: BitstreamStore) -> None:
    public = add(store, "q", "public")
    busy = region([F], loaded(public, "q", True, [F]), phase="fetch")
    assert "being programmed" in (provenance.refusal(busy, "q", store, Trust()) or "")
    done = region([F], loaded(public, "q", True, [F]), phase="failed")
    assert provenance.refusal(done, "q", store, Trust()) is None


def test_trust_is_read_from_the_configuration(conf: Any) -> None:
    conf.set_override("trusted_functions", ["AAAAAAAA-AAAA-AAAA-AAAA-AAAAAAAAAAAA"], "bitstreams")
    conf.set_override("require_signatures_projects", ["p"], "bitstreams")
    trust = Trust.from_conf(conf)
    assert trust.trusted_functions == {F} and trust.requires_signature("p")
    assert not trust.requires_signature("q")
