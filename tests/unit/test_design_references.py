"""Every design document the code and docs cite is in the repo: "spec NNN" has its page
docs/design/spec-NNN.md, every section cited of docs/design/hardware.md is there, every
Markdown file named is a file of the repo, and every `acceleron ...` command named is one
the CLI has."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DESIGN = REPO / "docs" / "design"
SPEC = re.compile(r"\bspec (\d{3})\b", re.IGNORECASE)
HARDWARE = re.compile(r"hardware\.md``? (§[\d.]+(?:(?:/| and |, )§[\d.]+)*)")


def cited_in() -> list[Path]:
    roots = [REPO / "src", REPO / "tests", REPO / "docs", REPO / "cloud", REPO / "bench"]
    files = [path for root in roots for path in root.rglob("*") if path.suffix in (".py", ".md")]
    return [*files, REPO / "README.md", REPO / "CONTRIBUTING.md"]


def test_every_cited_spec_has_its_page() -> None:
    cited = {m.group(1) for path in cited_in() for m in SPEC.finditer(path.read_text())}
    assert cited, "no spec cited: the pattern is wrong"
    missing = sorted(n for n in cited if not (DESIGN / f"spec-{n}.md").is_file())
    assert missing == []


def test_every_cited_hardware_section_is_there() -> None:
    headings = {
        m.group(1).rstrip(".")
        for m in re.finditer(r"^#+ ([\d.]+) ", (DESIGN / "hardware.md").read_text(), re.M)
    }
    cited = {
        section.lstrip("§").rstrip(".")
        for path in cited_in()
        for m in HARDWARE.finditer(path.read_text())
        for section in re.findall(r"§[\d.]+", m.group(1))
    }
    assert cited, "no section cited: the pattern is wrong"
    assert sorted(cited - headings) == []


def test_no_reference_points_outside_the_repo() -> None:
    outside = re.compile(r"(?<![/\w])(hardware|nova-contract)\.md|reference/hardware")
    found = [
        str(path.relative_to(REPO))
        for path in cited_in()
        if DESIGN not in path.parents
        and path != Path(__file__).resolve()
        and outside.search(path.read_text())
    ]
    assert found == []


# A Markdown file named in prose or a link: a path (relative to the citing file when it
# starts with ./ or ../), or a name some file of the repo ends with.
MARKDOWN = re.compile(r"(?<![\w/.:~-])((?:[\w.-]+/)*[\w-]+\.md)\b")


def _markdown_files() -> set[str]:
    skip = {".git", ".venv", "node_modules"}
    return {
        path.relative_to(REPO).as_posix()
        for path in REPO.rglob("*.md")
        if not skip & set(path.relative_to(REPO).parts)
    }


def test_every_cited_markdown_file_is_in_the_repo() -> None:
    known = _markdown_files()
    missing = []
    for path in cited_in():
        for cited in {m.group(1) for m in MARKDOWN.finditer(path.read_text())}:
            if cited.startswith(("./", "../")):
                target = (path.parent / cited).resolve()
                found = target.is_file() and REPO in target.parents
            else:
                found = any(name == cited or name.endswith("/" + cited) for name in known)
            if not found and "NNN" not in cited:
                missing.append(f"{path.relative_to(REPO)}: {cited}")
    assert missing == []


COMMAND = re.compile(r"`acceleron ([a-z][\w-]*)(?: ([a-z][\w-]*))?")


def test_every_cited_command_exists() -> None:
    from acceleron.cli.main import COMMANDS

    groups = {name.split()[0] for name in COMMANDS}
    wrong = [
        f"{path.relative_to(REPO)}: {m.group(0)}"
        for path in cited_in()
        for m in COMMAND.finditer(path.read_text())
        if m.group(1) not in COMMANDS
        and f"{m.group(1)} {m.group(2)}" not in COMMANDS
        and not (m.group(2) is None and m.group(1) in groups)
        and not any(name.startswith(f"{m.group(1)} {m.group(2)} ") for name in COMMANDS)
    ]
    assert wrong == []
