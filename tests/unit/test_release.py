"""``make release`` (.ci/release.py): what makes a commit a release, checked on trees of
files as a commit would hold them; and the checkout's own version, as the commands show
it."""

from __future__ import annotations

from pathlib import Path

import pytest

import acceleron
from acceleron.cli.main import main
from tests.fixtures.ci import ci_module

REPO = Path(__file__).resolve().parents[2]


release = ci_module("release")


def tree(tmp_path: Path, version: str, changelog: str, install: str = "") -> Path:
    (tmp_path / "src/acceleron").mkdir(parents=True)
    (tmp_path / "src/acceleron/__init__.py").write_text(f'__version__ = "{version}"\n')
    (tmp_path / "CHANGELOG.md").write_text(f"# Changelog\n\n{changelog}\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/install.md").write_text(f"# Installing\n\n{install}\n")
    return tmp_path


def test_a_release_commit_passes(tmp_path: Path) -> None:
    files = tree(
        tmp_path,
        "0.2.0",
        "## 0.2.0 (2026-12-01)\n\n- x",
        "pip install acceleron-0.2.0-py3-none-any.whl",
    )
    assert release.check_files(files) == "0.2.0"


@pytest.mark.parametrize(
    ("version", "changelog", "install", "message"),
    [
        ("0.2.0.dev0", "## Unreleased", "", "0.2.0.dev0 is not a release"),
        ("0.2.0rc1", "## 0.2.0rc1 (2026-12-01)", "", "0.2.0rc1 is not a release"),
        ("0.2.0", "## Unreleased", "acceleron-0.2.0-py3-none-any.whl",
         "CHANGELOG.md has no section for 0.2.0"),
        ("0.2.0", "## 0.2.0", "acceleron-0.2.0-py3-none-any.whl",
         "CHANGELOG.md has no section for 0.2.0"),
        ("0.2.0", "## 0.2.0 (2026-12-01)", "acceleron-0.1.0-py3-none-any.whl",
         "docs/install.md does not name acceleron-0.2.0-py3-none-any.whl"),
        ("two", "## two (2026-12-01)", "", "'two' is not a version"),
    ],
)  # fmt: skip
def test_what_is_not_a_release_is_refused(
    tmp_path: Path, version: str, changelog: str, install: str, message: str
) -> None:
    with pytest.raises(release.ReleaseError, match=message.replace(".", r"\.")):
        release.check_files(tree(tmp_path, version, changelog, install))


def test_a_development_commit_is_checked_as_one(tmp_path: Path) -> None:
    files = tree(tmp_path, "0.2.0.dev0", "## Unreleased")
    assert release.check_files(files, allow_dev=True) == "0.2.0.dev0"
    (files / "CHANGELOG.md").write_text("# Changelog\n\n## 0.1.0 (2026-11-27)\n")
    with pytest.raises(release.ReleaseError, match="no '## Unreleased' section"):
        release.check_files(files, allow_dev=True)


def test_this_checkout_is_what_the_procedure_expects() -> None:
    """main is a development version with its Unreleased section (a release commit is
    checked by `make release` itself)."""
    version = release.check_files(REPO, allow_dev=True)
    assert version == acceleron.__version__


def test_the_version_is_named_by_acceleron_version(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"acceleron {acceleron.__version__}\n"
