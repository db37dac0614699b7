"""How the tests are laid out: pytest's ``conftest.py`` modules hold fixtures and hooks
only, and what tests share otherwise lives in ``tests/fixtures/``, so no test imports a
conftest (a conftest imported as a module is loaded twice, under two names)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_no_test_module_imports_a_conftest() -> None:
    offenders = [
        f"{path.relative_to(TESTS)}: {name}"
        for path in sorted(TESTS.rglob("*.py"))
        for name in sorted(imported(path))
        if name.split(".")[-1] == "conftest"
    ]
    assert not offenders, "move what they use to tests/fixtures/:\n" + "\n".join(offenders)
