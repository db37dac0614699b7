"""Every acceleron.conf snippet in docs/ is loaded by the service's own loader: one that
does not parse, holds a bad value, or names an option or section nothing reads fails.

A snippet is an ```ini block. One of another file (nova.conf, a systemd unit) says so in
its first line, a comment naming that file, and is left out."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron import conf as confmod

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>\S*)\s*$")
# The first line of a block of another file: "# nova.conf ...", "# /etc/systemd/...".
OTHER_FILE = re.compile(r"#\s*(?P<file>\S+\.(conf|service|ini))\b")


def blocks(lang: str = "ini") -> list[tuple[str, str]]:
    """(``file:line``, text) of every ``lang`` block of the docs, dedented."""
    found = []
    for path in sorted(DOCS.rglob("*.md")):
        lines = path.read_text().splitlines()
        index = 0
        while index < len(lines):
            opening = FENCE.match(lines[index])
            if opening is None:
                index += 1
                continue
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if opening["lang"] == lang:
                text = textwrap.dedent("\n".join(lines[index + 1 : end])) + "\n"
                found.append((f"{path.relative_to(DOCS.parent)}:{index + 1}", text))
            index = end + 1
    return found


def of_acceleron(text: str) -> bool:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    named = OTHER_FILE.match(first)
    return named is None or Path(named["file"]).name == "acceleron.conf"


SNIPPETS = [(where, text) for where, text in blocks() if of_acceleron(text)]


def test_the_docs_have_snippets_to_check() -> None:
    assert len(SNIPPETS) >= 10
    # Those left out name their file.
    others = [where for where, text in blocks() if not of_acceleron(text)]
    assert others, "nova.conf snippets are expected in docs/deploy-with-nova.md"


@pytest.mark.parametrize(("where", "text"), SNIPPETS, ids=[w for w, _ in SNIPPETS])
def test_a_snippet_loads(where: str, text: str, tmp_path: Path) -> None:
    path = tmp_path / "acceleron.conf"
    path.write_text(text)
    try:
        conf = confmod.load([], config_files=[str(path)])
        for name in list(conf):  # every value read, as the services read them
            value = conf[name]
            if isinstance(value, cfg.ConfigOpts.GroupAttr):
                for option in list(value):
                    value[option]
    except cfg.Error as error:
        pytest.fail(f"{where}: {error}")
    assert confmod.unknown_options([str(path)]) == [], where
    # oslo.config keeps a comment after a value as part of the value.
    sections: dict[str, dict[str, list[str]]] = {}
    cfg.ConfigParser(str(path), sections).parse()
    commented = [
        f"[{section}] {key} = {value}"
        for section, values in sections.items()
        for key, found in values.items()
        for value in found
        if re.search(r"\s#", value)
    ]
    assert commented == [], f"{where}: a comment after a value is part of the value"


def test_a_section_line_with_a_comment_does_not_parse(tmp_path: Path) -> None:
    """What docs/install.md had: oslo.config takes no comment after a section."""
    path = tmp_path / "acceleron.conf"
    path.write_text("[glance]   # with [bitstreams] backend = glance\nauth_type = password\n")
    with pytest.raises(cfg.ConfigFileParseError):
        confmod.load([], config_files=[str(path)])


def test_unknown_options_and_sections_are_named(tmp_path: Path) -> None:
    path = tmp_path / "acceleron.conf"
    path.write_text(
        "[DEFAULT]\ndebug = true\nlog_fiel = x\n"
        "[api]\nport = 1\n"
        "[placement]\nauth_type = password\nusername = a\nusernme = b\n"
        "[filter_scheduler]\nweight_classes = x\n"
    )
    assert confmod.unknown_options([str(path)]) == [
        "[DEFAULT] log_fiel",
        "[placement] usernme",
        "[filter_scheduler]",
    ]
