"""What the CLI's tables show a person, and what they keep for scripts (-f value, json)."""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

from acceleron.cli import quotas
from acceleron.cli.main import AcceleronApp
from acceleron.cli.quotas import ShowQuota


class Quotas(ShowQuota):
    """``quota show`` with the API's answer given, not asked for."""

    answer: list[dict[str, Any]] = [
        {"resource": "class:CUSTOM_ACCELERATOR_QAT", "limit": 2, "usage": 1},
        {"resource": "class:CUSTOM_ACCELERATOR_FPGA", "limit": None, "usage": 3},
    ]

    def take_action(self, parsed_args: argparse.Namespace) -> tuple[Any, Any]:
        return quotas.COLUMNS, [quotas._row(q) for q in self.answer]


def shown(*formatter: str) -> str:
    out = io.StringIO()
    app = AcceleronApp()
    app.stdout = out
    command = Quotas(app, None)
    parsed = command.get_parser("quota show").parse_args([*formatter])
    command.run(parsed)
    return out.getvalue()


def test_an_unlimited_class_reads_unlimited_in_a_table_and_null_in_json() -> None:
    table = shown()
    assert "| class:CUSTOM_ACCELERATOR_FPGA | unlimited |     3 |" in table
    assert "None" not in table
    assert json.loads(shown("-f", "json"))[1]["limit"] is None
