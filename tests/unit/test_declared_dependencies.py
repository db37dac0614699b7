"""Every module the package imports comes from a dependency it declares without extras.

An import that arrives only through the test extra (or through another package's
dependencies) works in the test suite and fails in `pip install .`: the API died at start
with ``No module named 'prometheus_client'`` that way. This test reads every import in
``src/`` (the lazy ones inside functions too), finds the distribution that provides each
top-level module, and checks that pyproject.toml names it in ``dependencies``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
OWN = {"acceleron", "os_acc"}
# Imported only where the host process provides them: the weigher runs inside Nova's
# scheduler, which brings ``nova``.
PROVIDED_BY_THE_HOST = {"nova"}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_modules() -> dict[str, set[str]]:
    """Top-level module name -> the files under src/ that import it."""
    found: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def declared() -> set[str]:
    """The distributions pyproject.toml's ``dependencies`` name (no extras)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {
        canonical(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0])
        for spec in project["dependencies"]
    }


def test_every_third_party_import_is_a_declared_dependency() -> None:
    providers = metadata.packages_distributions()
    wanted = declared()
    missing: dict[str, set[str]] = {}
    for module, files in imported_modules().items():
        if module in OWN | PROVIDED_BY_THE_HOST | set(sys.stdlib_module_names):
            continue
        distributions = {canonical(d) for d in providers.get(module, [])}
        assert distributions, f"{module} (imported by {sorted(files)}) is not installed"
        if not distributions & wanted:
            missing[f"{module} ({', '.join(sorted(distributions))})"] = files
    assert not missing, f"imported but not declared in [project] dependencies: {missing}"


def test_the_check_sees_lazy_imports() -> None:
    """Imports inside functions count: oslo.limit is imported only when quotas use it."""
    assert "oslo_limit" in imported_modules()
