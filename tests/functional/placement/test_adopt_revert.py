"""The way back from an adoption (``acceleron adopt revert``, service/adopt_revert.py),
from the plan's document, against the real Placement in-process: Placement is as it was
before the adoption, Cyborg's providers and every server's allocation.

The cloud is tests/fixtures/adoption.py's.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from acceleron.cli.main import main
from acceleron.placement.client import Inventory
from acceleron.service import adopt, adopt_revert
from tests.fixtures.adoption import HOST, Cloud, allocate, cloud, placement_url
from tests.fixtures.cyborg import cyborg, cyborg_url

__all__ = ["cloud", "cyborg", "cyborg_url", "placement_url"]


def _adopted(cloud: Cloud) -> dict[str, Any]:
    """Adopt; the plan's document, as the command line writes it."""
    the_plan = cloud.plan()
    document: dict[str, Any] = json.loads(json.dumps(adopt_revert.document(the_plan), default=str))
    adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    return document


def test_the_way_back_puts_placement_back_as_it_was(cloud: Cloud) -> None:
    before = cloud.placement_state()
    document = _adopted(cloud)
    assert cloud.placement_state() != before
    steps = adopt_revert.plan(cloud.client(), document)
    assert steps.problems == [], steps.problems
    adopt_revert.apply(cloud.client(), steps)
    assert cloud.placement_state() == before
    again = adopt_revert.plan(cloud.client(), document)  # a second run changes nothing
    assert again.servers == [] and again.delete == [] and again.problems == []


def test_the_way_back_from_a_later_run_s_document(cloud: Cloud) -> None:
    """The document of a run after the adoption (nothing to do) holds what the first
    recorded: Cyborg's providers as they were, the servers as they were."""
    before = cloud.placement_state()
    _adopted(cloud)
    later = adopt_revert.document(cloud.plan())
    assert cloud.plan().nothing_to_do
    steps = adopt_revert.plan(cloud.client(), json.loads(json.dumps(later, default=str)))
    adopt_revert.apply(cloud.client(), steps)
    assert cloud.placement_state() == before


def test_a_server_deleted_since_is_left_alone_and_a_new_one_stops_it(cloud: Cloud) -> None:
    document = _adopted(cloud)
    gone, kept = list(cloud.servers)
    cloud.client().delete_allocations(gone)
    newcomer = str(uuid.uuid4())
    region = next(
        p.uuid for p in cloud.client().list_providers() if p.name.endswith("_region0")
    )  # one of Acceleron's, where a server booted through Acceleron lands
    allocate(cloud.placement, newcomer, {region: {"CUSTOM_ACCELERATOR_FPGA": 1}})
    steps = adopt_revert.plan(cloud.client(), document)
    assert any(newcomer in p and "Cyborg does not know it" in p for p in steps.problems)
    with pytest.raises(adopt_revert.RevertRefused):
        adopt_revert.apply(cloud.client(), steps)
    cloud.client().delete_allocations(newcomer)
    steps = adopt_revert.plan(cloud.client(), document)
    assert steps.problems == [] and [r.consumer for r in steps.servers] == [kept]
    adopt_revert.apply(cloud.client(), steps)
    assert cloud.allocations(gone) == {}
    assert cloud.allocations(kept)[cloud.old_provider] == {"FPGA": 1}
    provider = cloud.client().get_provider(cloud.old_provider)
    assert provider is not None and provider.name.startswith(HOST)
    assert cloud.client().get_inventories(cloud.old_provider)[1] == {"FPGA": Inventory(3)}


def test_the_documented_commands_go_there_and_back(
    cloud: Cloud, placement_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/adopt-from-cyborg.md's commands: a dry run that writes the plan file, the
    adoption, then the way back from the file."""
    before = cloud.placement_state()
    config = cloud.config(tmp_path / "acceleron.conf", placement_url)
    (tmp_path / "mapping.yaml").write_text("traits:\n  CUSTOM_FAKE_DEVICE: CUSTOM_FPGA_INTEL\n")
    url = tmp_path / "cyborg-db.url"
    url.write_text(cloud.cyborg.url + "\n")
    plan = tmp_path / "plan.json"
    adopt_cyborg = [
        "--config-file",
        str(config),
        "adopt",
        "cyborg",
        "--database-file",
        str(url),
        "--mapping",
        str(tmp_path / "mapping.yaml"),
    ]
    assert main([*adopt_cyborg, "--dry-run", "--plan-file", str(plan)]) == 0, capsys.readouterr()
    assert cloud.placement_state() == before
    assert main([*adopt_cyborg, "--plan-file", str(plan)]) == 0, capsys.readouterr()
    revert = ["--config-file", str(config), "adopt", "revert", "--plan-file", str(plan)]
    assert main([*revert, "--dry-run"]) == 0, capsys.readouterr()
    assert main(revert) == 0, capsys.readouterr()
    assert cloud.placement_state() == before
