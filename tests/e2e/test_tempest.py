"""Upstream's own API tests, cyborg-tempest-plugin's ``tests.api``, against the cloud's
Acceleron (Keystone mode, two replicas behind the balancer), in both of the suite's policy
modes: its personas with the SRBAC tests (``[cyborg_policy] enforce_new_defaults``), and
every persona the admin (upstream's legacy defaults).

Every test must pass but those that expect a 500, which docs/api/compatibility.md names.
The tally of each run is written to ``.cloud/run/tempest-<mode>/tally.json``.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cloud.base import REGION, REPO, RUN, Cloud, venv
from cloud.configs import render

COMPATIBILITY = REPO / "docs" / "api" / "compatibility.md"
SUITE = r"^cyborg_tempest_plugin\.tests\.api\."


def expected_failures() -> set[str]:
    """``Class.test`` of the upstream tests the compatibility doc says fail by design."""
    return set(re.findall(r"`(\w+Test\.test_\w+)`", COMPATIBILITY.read_text()))


def tally(output: str) -> dict[str, int]:
    """The counts of ``tempest run``'s closing summary."""
    found = re.findall(r"- (Passed|Skipped|Failed|Expected Fail|Unexpected Success): (\d+)", output)
    return {name.lower(): int(count) for name, count in found}


def short(test_id: str) -> str:
    """``pkg.module.Class.test_x[id-...]`` -> ``Class.test_x``."""
    return ".".join(test_id.split("[")[0].split(".")[-2:])


@pytest.mark.parametrize("mode", ["new-defaults", "legacy"])
def test_upstream_api_tests(cloud: Cloud, mode: str) -> None:
    tempest = venv("tempest") / "bin"
    workspace = RUN / f"tempest-{mode}"
    subprocess.run(
        [
            str(tempest / "tempest"),
            "init",
            "--workspace-path",
            str(RUN / "tempest.yaml"),
            "--name",
            mode,
            str(workspace),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    values = {
        "workspace": str(workspace),
        "password": cloud.password,
        "auth_url": cloud.auth_url,
        "region": REGION,
        "new_defaults": str(mode == "new-defaults").lower(),
    }
    render("tempest.conf", workspace / "etc" / "tempest.conf", values)
    done = subprocess.run(
        [str(tempest / "tempest"), "run", "--regex", SUITE, "--concurrency", "2"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    failing = subprocess.run(
        [str(tempest / "stestr"), "failing", "--list"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    failed = {short(line) for line in failing.split() if line.startswith("cyborg_")}
    counts = tally(done.stdout)
    record = {"mode": mode, **counts, "failed_tests": sorted(failed)}
    (workspace / "tally.json").write_text(json.dumps(record, indent=2) + "\n")
    assert counts.get("passed", 0) > 0, f"tempest ran nothing:\n{done.stdout[-3000:]}"
    unexpected = failed - expected_failures()
    assert not unexpected, f"{sorted(unexpected)} failed:\n{done.stdout[-6000:]}"
    assert counts.get("failed", 0) == len(failed), done.stdout[-3000:]
    if mode == "new-defaults":
        assert counts.get("skipped", 0) == 0, done.stdout[-3000:]


def test_compatibility_doc_names_real_tests() -> None:
    """The doc's list of tests that fail by design names tests the plugin has."""
    plugin = next((venv("tempest") / "lib").glob("python3*/site-packages/cyborg_tempest_plugin"))
    source = "\n".join(p.read_text() for p in Path(plugin, "tests", "api").glob("test_*.py"))
    for name in expected_failures():
        cls, test = name.split(".")
        assert f"class {cls}(" in source and f"def {test}(" in source, name
