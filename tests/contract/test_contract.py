"""Acceleron's API contract: one gabbi YAML file per resource, beside this module.

Each file is one test: its requests run in order against a fresh app (the ``fixtures``
it names, from ``fixtures.py``), and the test fails listing every request of the file
whose answer broke the contract. A file is run whole, never split between pytest
workers: its requests build on each other.
"""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import pytest
from gabbi import handlers, suitemaker, utils  # type: ignore[import-untyped]
from starlette.routing import Mount, Route

from acceleron import conf as confmod
from acceleron.api.app import create_app
from acceleron.db.session import Database
from tests.contract import fixtures

HERE = Path(__file__).parent
FILES = sorted(HERE.glob("*.yaml"))


def suite_of(path: Path) -> unittest.TestSuite:
    """The gabbi tests of one file, as gabbi's driver builds them."""
    checks = [handler() for handler in handlers.RESPONSE_HANDLERS]
    suite: unittest.TestSuite = suitemaker.test_suite_from_dict(
        unittest.TestLoader(),
        path.stem,
        utils.load_yaml(yaml_file=str(path)),
        str(HERE),
        "contract",
        None,
        fixtures,
        fixtures.intercept,
        handlers=checks,
    )
    return suite


def last(trace: str) -> str:
    """A failure's message: what follows the last frame of its traceback."""
    lines = trace.rstrip().splitlines()
    frame = max((i for i, line in enumerate(lines) if line.startswith('  File "')), default=-1)
    start = frame + 1
    while start < len(lines) and lines[start].startswith("    "):
        start += 1
    return "\n".join(lines[start:])[:3000]


def marks(path: Path) -> list[pytest.MarkDecorator]:
    """A file whose fixtures run the real Placement is marked as every such test is."""
    named = utils.load_yaml(yaml_file=str(path)).get("fixtures", [])
    return [pytest.mark.placement] if "PlacementApi" in named else []


@pytest.mark.parametrize(
    "path", [pytest.param(path, id=path.stem, marks=marks(path)) for path in FILES]
)
def test_contract(path: Path) -> None:
    suite = suite_of(path)
    total = suite.countTestCases()
    result = unittest.TestResult()
    suite.run(result)
    broken = [f"{test.id()}: {last(trace)}" for test, trace in result.failures + result.errors]
    if broken:
        pytest.fail(
            f"{len(broken)} of {total} broke the contract:\n" + "\n".join(broken), pytrace=False
        )
    assert result.testsRun == total and not result.skipped, result.skipped


# A request's URL as a file writes it: what a template stands for ($ENVIRON['X'],
# $HISTORY['test'].$RESPONSE['$.path'], $RESPONSE[...]) is one path segment.
TEMPLATE = re.compile(r"(\$HISTORY\['[^']*'\]\.)?\$(ENVIRON|RESPONSE)\['[^']*'\]")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def requested() -> set[tuple[str, str]]:
    """(method, path) of every request of every file, templates made a segment."""
    found = set()
    for path in FILES:
        for test in utils.load_yaml(yaml_file=str(path))["tests"]:
            for method in METHODS:
                if isinstance(test.get(method), str):
                    url = TEMPLATE.sub("x", test[method]).split("?")[0]
                    found.add((method, url))
    return found


def served() -> list[tuple[str, str]]:
    """(method, path template) of every route the app serves, those outside its OpenAPI
    document included (its own page, the operator page, /metrics); a mount (the embedded
    Placement) as ``/placement/{path}``. HEAD is served as the GET."""
    settings = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": "/x"},
            "placement": {"mode": "embedded", "embedded_connection": "sqlite://"},
        },
    )
    found = []
    for route in create_app(settings, Database("sqlite://")).routes:
        if isinstance(route, Mount):
            found += [("GET", f"{route.path}/{{path}}")]
            continue
        assert isinstance(route, Route), route
        found += [(m, route.path) for m in sorted((route.methods or set()) - {"HEAD"})]
    return found


def test_every_route_has_a_contract() -> None:
    """Each route the app serves is requested by some file."""
    asked = requested()
    missing = []
    for method, template in served():
        pattern = re.compile("^" + re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template)) + "$")
        if not any(m == method and pattern.match(u) for m, u in asked):
            missing.append(f"{method} {template}")
    assert not missing, "routes no contract file requests:\n" + "\n".join(missing)
