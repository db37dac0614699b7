"""Property-based fuzzing of the whole API from its own OpenAPI schema (schemathesis).

Every operation gets generated valid and invalid requests, on every database
backend; the answer must never be a 5xx, must be a documented status with the
documented content type, and its body must match the documented schema.

``ACCELERON_FUZZ_EXAMPLES`` sets how many examples each operation gets: 40 unless
set (what CI runs); ``make check`` runs a short pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from oslo_config import cfg
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from acceleron.api.app import create_app
from acceleron.db.session import Database
from acceleron.service import device_profiles

EXAMPLES = int(os.environ.get("ACCELERON_FUZZ_EXAMPLES", "40"))

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def operations(conf: cfg.ConfigOpts, db: Database) -> Iterator[Any]:
    for name in ("dp1", "dp2"):
        device_profiles.create(db, name=name, groups=[{"resources:FPGA": "1"}])
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(conf, db))
    for result in schema.get_all_operations():
        yield result.ok()  # type: ignore[union-attr]  # every operation of ours loads


# Every operation in one test: 2 to 4 minutes of CPU, which a loaded 2-core machine
# stretches past the suite's 300 s (pytest-timeout stays the guard against a hang).
@pytest.mark.timeout(1200)
def test_no_server_errors(conf: cfg.ConfigOpts, db: Database) -> None:
    tested = []
    for operation in operations(conf, db):

        @given(case=operation.as_strategy())
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def fuzz(case: Any) -> None:
            if case.query and "wait" in case.query:  # long polls are tested on their own
                case.query["wait"] = 0
            for version in (None, "accelerator latest"):
                headers = {"OpenStack-API-Version": version} if version else {}
                case.call_and_validate(headers=headers, checks=CHECKS)

        fuzz()
        tested.append(operation.label)
    assert len(tested) >= 7, tested
