"""Microversion negotiation: header forms, defaults and refusals."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from acceleron import microversion as mv


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


def test_versions_are_contiguous_and_ordered() -> None:
    parsed = [mv.Version(*map(int, v.split("."))) for v in mv.VERSIONS]
    assert parsed == sorted(parsed)
    assert all(b.minor == a.minor + 1 for a, b in itertools.pairwise(parsed))
    assert parsed[0] == mv.MIN_VERSION == mv.Version(2, 0)
    assert parsed[-1] == mv.MAX_VERSION


def test_every_version_has_its_constant() -> None:
    for text in mv.VERSIONS:
        version = mv.parse(text)
        assert getattr(mv, f"V{version.major}_{version.minor}") == version


@pytest.mark.parametrize("text", ["2.16", " 2.0 ", "10.123"])
def test_parse(text: str) -> None:
    major, minor = text.split(".")
    assert mv.parse(text) == mv.Version(int(major), int(minor))
    assert str(mv.parse(text)) == text.strip()


@pytest.mark.parametrize("text", ["", "2", "2.", "2.1.1", "latest", "v2.1", "2,1", "-2.1",
                                  "\u0662.1", "2.1234567890"])  # fmt: skip
def test_parse_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"expected '<major>\.<minor>'"):
        mv.parse(text)


SRC = Path(__file__).resolve().parents[2] / "src"
# A spelled version of ours: a string "2.N", a tuple (2, N), Version(...) built by hand,
# or the "needs microversion" wording written again.
SPELLED = re.compile(r"""["']2\.\d+["']|\(2, ?\d+\)|Version\(\d|needs microversion""")
# Other services' microversions, which are not ours to name.
OTHERS = {("acceleron/service/nova.py", '"2.82"')}


def test_no_module_but_the_versions_module_spells_a_version() -> None:
    """Every side (the API, the agent, the CLI, the scheduler, os_acc) names a version
    by its constant in the versions module and compares Version values parsed there."""
    found = [
        f"{name}:{number}: {line.strip()}"
        for path in sorted(SRC.rglob("*.py"))
        if path != Path(mv.__file__).resolve()
        if (name := path.relative_to(SRC).as_posix())
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in SPELLED.finditer(line)
        if (name, match.group()) not in OTHERS
    ]
    assert found == []
