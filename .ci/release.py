"""``make release``: the wheel and sdist of a release commit, checked (CONTRIBUTING.md,
"Releases").

A release commit is one whose ``acceleron.__version__`` names a release (``0.2.0``, not
``0.2.0.dev0``). Its files are taken from the commit (``git archive``: nothing the
working tree adds or changes), checked, and built:

- ``__version__`` is a final release, and the working tree has no change to it;
- CHANGELOG.md has the release's section, ``## <version> (YYYY-MM-DD)``;
- docs/install.md names the release's wheel, ``acceleron-<version>-py3-none-any.whl``;
- the sdist and the wheel built from the commit carry that version (the file names, and
  the wheel's own ``Version:``).

``--check`` does all of it on a commit that is not a release (``.ci/run`` on every
commit): the version may be a ``.devN`` one, and then the CHANGELOG needs its
``## Unreleased`` section instead, and docs/install.md is not asked to name it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
VERSION_FILE = "src/acceleron/__init__.py"


class ReleaseError(Exception):
    """What stops a release, in one line."""


def version_in(text: str) -> str:
    found = re.search(r"^__version__ = [\"']([^\"']+)[\"']", text, re.MULTILINE)
    if found is None:
        raise ReleaseError(f"no __version__ in {VERSION_FILE}")
    return found.group(1)


def is_release(version: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion as error:
        raise ReleaseError(f"{version!r} is not a version (PEP 440)") from error
    return not (parsed.is_devrelease or parsed.is_prerelease or parsed.local)


def check_files(tree: Path, allow_dev: bool = False) -> str:
    """The release's version, once the files under ``tree`` (a commit's) show it is one:
    else a ReleaseError that says what is missing."""
    version = version_in((tree / VERSION_FILE).read_text())
    release = is_release(version)
    if not release and not allow_dev:
        raise ReleaseError(
            f"{version} is not a release: a release commit sets __version__ to one "
            '(e.g. "0.2.0"), CONTRIBUTING.md "Releases". `make release-check` checks and '
            "builds this commit as it is."
        )
    changelog = (tree / "CHANGELOG.md").read_text()
    if release:
        heading = rf"^## {re.escape(version)} \(\d{{4}}-\d{{2}}-\d{{2}}\)$"
        if not re.search(heading, changelog, re.MULTILINE):
            raise ReleaseError(
                f"CHANGELOG.md has no section for {version}: its '## Unreleased' becomes "
                f"'## {version} (YYYY-MM-DD)' in the release commit."
            )
        wheel = f"acceleron-{version}-py3-none-any.whl"
        if wheel not in (tree / "docs/install.md").read_text():
            raise ReleaseError(
                f"docs/install.md does not name {wheel}: its 'Installing a release' names "
                "the release's wheel in the release commit."
            )
    elif not re.search(r"^## Unreleased$", changelog, re.MULTILINE):
        raise ReleaseError("CHANGELOG.md has no '## Unreleased' section for what comes next.")
    return version


def export(commit: str, into: Path) -> None:
    """The commit's files under ``into``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", commit],
                             check=True, capture_output=True).stdout  # fmt: skip
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def changed(path: str) -> bool:
    """Whether the working tree differs from HEAD at ``path`` (or anywhere: '.')."""
    found = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", path],
                           check=True, capture_output=True, text=True).stdout  # fmt: skip
    return bool(found.strip())


def build(tree: Path, out: Path, version: str) -> list[Path]:
    """The sdist and the wheel built from ``tree`` (the wheel from the sdist, as uv does),
    checked to carry ``version``."""
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "build", "-q", "--out-dir", str(out), str(tree)], check=True)
    sdist, wheel = (
        out / f"acceleron-{version}.tar.gz",
        out / f"acceleron-{version}-py3-none-any.whl",
    )
    for artefact in (sdist, wheel):
        if not artefact.is_file():
            built = ", ".join(sorted(p.name for p in out.iterdir()))
            raise ReleaseError(f"{artefact.name} was not built (built: {built})")
    with zipfile.ZipFile(wheel) as whole:
        metadata = whole.read(f"acceleron-{version}.dist-info/METADATA").decode()
    if f"\nVersion: {version}\n" not in metadata:
        raise ReleaseError(f"{wheel.name}'s METADATA does not say Version: {version}")
    return [sdist, wheel]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist", help="where to put them")
    parser.add_argument("--check", action="store_true",
                        help="a commit that is not a release is checked and built too")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        if not args.check and changed("."):
            raise ReleaseError(
                "the working tree has changes: a release is built from its commit alone; "
                "commit them first."
            )
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True,
                                capture_output=True, text=True).stdout.strip()  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="acceleron-release-") as work:
            tree = Path(work) / "tree"
            tree.mkdir()
            export(commit, tree)
            version = check_files(tree, allow_dev=args.check)
            args.out.mkdir(parents=True, exist_ok=True)
            built = build(tree, args.out, version)
    except ReleaseError as error:
        print(f"release: {error}", file=sys.stderr)
        return 1
    print(f"Acceleron {version}, from commit {commit}:")
    for artefact in built:
        digest = hashlib.sha256(artefact.read_bytes()).hexdigest()
        print(f"  {artefact}  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
