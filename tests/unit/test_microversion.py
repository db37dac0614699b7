"""Microversion negotiation: header forms, defaults and refusals."""

from __future__ import annotations

import itertools

import pytest

from acceleron.api import microversion as mv


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, mv.Version(2, 0)),
        ("", mv.Version(2, 0)),
        ("accelerator 2.2", mv.Version(2, 2)),
        ("ACCELERATOR 2.1", mv.Version(2, 1)),
        ("  accelerator   2.3 ", mv.Version(2, 3)),
        ("2.3", mv.Version(2, 3)),
        ("accelerator latest", mv.MAX_VERSION),
        ("latest", mv.MAX_VERSION),
    ],
)
def test_accepted(header: str | None, expected: mv.Version) -> None:
    assert mv.negotiate(header) == expected


@pytest.mark.parametrize(
    "header",
    ["accelerator 3.0", "accelerator 1.9", "accelerator 2.99", "compute 2.1", "accelerator",
     "accelerator two", "accelerator 2", "accelerator 2.1.1", "a b c", "accelerator -2.1"],
)  # fmt: skip
def test_refused(header: str) -> None:
    with pytest.raises(mv.NotAcceptable):
        mv.negotiate(header)


# Numbers handed to branches not merged yet (the lead removes each as it merges).
PENDING = {mv.Version(2, m) for m in (10, 11, 12, 13)}


def test_versions_are_contiguous_and_ordered() -> None:
    parsed = [mv.Version(*map(int, v.split("."))) for v in mv.VERSIONS]
    assert parsed == sorted(parsed)
    whole = sorted(set(parsed) | PENDING)
    assert all(b.minor == a.minor + 1 for a, b in itertools.pairwise(whole))
    assert parsed[0] == mv.MIN_VERSION == mv.Version(2, 0)
    assert parsed[-1] == mv.MAX_VERSION
