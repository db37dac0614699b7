"""What the docs take from the code is current: run ``make docs`` when this fails."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi import FastAPI

from acceleron import conf as confmod
from acceleron.api import policy, reference
from acceleron.api.app import create_app

ROOT = Path(__file__).resolve().parents[2]


def app() -> FastAPI:
    return create_app(confmod.load([], config_files=[]), check_schema=False)


@pytest.mark.parametrize(
    ("path", "generate"),
    [
        ("docs/api/reference.md", lambda: reference.render(app())),
        ("docs/api/openapi.json", lambda: reference.openapi_json(app())),
        ("etc/acceleron.conf.sample", confmod.sample),
        ("etc/policy.yaml.sample", policy.defaults_yaml),
    ],
)
def test_generated_file_is_current(path: str, generate: Callable[[], str]) -> None:
    assert (ROOT / path).read_text() == generate(), f"{path} is stale: run `make docs`"
