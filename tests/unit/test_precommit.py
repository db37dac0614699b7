"""The commit hooks CONTRIBUTING.md offers (`make hooks`): pre-commit is installed with
the test extra, its configuration is valid, each hook runs a tool the venv has, and the
commit-msg hook is installed beside the pre-commit one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / ".pre-commit-config.yaml"


def test_the_configuration_is_valid_for_the_installed_pre_commit() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pre_commit", "validate-config", str(CONFIG)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_hook_runs_a_tool_of_the_venv() -> None:
    hooks = [hook for repo in yaml.safe_load(CONFIG.read_text())["repos"] for hook in repo["hooks"]]
    assert {hook["id"] for hook in hooks} == {"ruff-check", "ruff-format", "mypy", "commit-subject"}
    for hook in hooks:
        tool = hook["entry"].split()[0]
        assert (
            tool.startswith(".venv/bin/")
            and (Path(sys.executable).parent / Path(tool).name).exists()
        )


def test_make_hooks_installs_it() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "hooks"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines()[-1] == ".venv/bin/pre-commit install"
    config = yaml.safe_load(CONFIG.read_text())
    assert config["default_install_hook_types"] == ["pre-commit", "commit-msg"]
