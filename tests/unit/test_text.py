"""One control-character rule (acceleron/text.py), and no module spelling its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceleron.text import has_control

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x1b", "\x1f", "\x7f"])
def test_c0_and_del_are_control_characters(char: str) -> None:
    assert has_control(f"a{char}b")
    assert has_control(f"a{char}b", layout=True)


@pytest.mark.parametrize("char", ["\t", "\n", "\r"])
def test_layout_counts_only_where_it_is_refused(char: str) -> None:
    assert has_control(f"a{char}b")
    assert not has_control(f"a{char}b", layout=True)


def test_plain_and_non_ascii_text_has_none() -> None:
    assert not has_control("rocket-\U0001f680 é ü 中")
    assert not has_control("")


def test_no_other_module_spells_the_control_range() -> None:
    spelled = [
        str(path.relative_to(SRC))
        for path in sorted(SRC.rglob("*.py"))
        if path.name != "text.py" and ("\\x1f" in path.read_text() or "\\x7f" in path.read_text())
    ]
    assert spelled == [], f"use acceleron.text.has_control in {spelled}"
