"""``acceleron adopt cyborg`` against Cyborg's real schema (made by its own
cyborg-dbsync), the real Placement in-process, and Acceleron's database on every backend.

The cloud of each test is tests/fixtures/adoption.py's: compute node ``compute-1``, one
FPGA card that Cyborg publishes as ``compute-1_<PCI address>`` and Acceleron's fake
driver reports with two regions (handles .1 .2 and .3); two servers booted under Cyborg,
bound to handles .1 and .3.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
from keystoneauth1 import adapter
from keystoneauth1 import exceptions as ks_exc
from sqlalchemy import column, select
from sqlalchemy import table as core_table

from acceleron.db.models import utcnow
from acceleron.exceptions import InvalidInput, PlacementUnavailable
from acceleron.service import adopt, adopt_plan, cyborg_db
from tests.fixtures.adoption import (
    ARQS,
    HANDLES,
    HOST,
    MAPPING,
    PROFILES,
    Cloud,
    allocate,
    cloud,
)
from tests.fixtures.cyborg import cyborg, cyborg_url
from tests.fixtures.cyborg import rp_uuid as adopt_rp

__all__ = ["cloud", "cyborg", "cyborg_url"]


def _totals(allocations: dict[str, dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for resources in allocations.values():
        for rc, n in resources.items():
            key = "accelerator" if rc in ("FPGA", "CUSTOM_ACCELERATOR_FPGA") else rc
            out[key] = out.get(key, 0) + n
    return out


def test_a_dry_run_prints_the_plan_and_changes_nothing(cloud: Cloud) -> None:
    before = cloud.state()
    the_plan = cloud.plan()
    assert the_plan.problems == []
    text = "\n".join(the_plan.lines())
    assert "create fpga-dp" in text
    assert (
        '+ {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}'
        in text
    )
    assert f"rename provider {HOST}_" in text  # Acceleron's card provider wants its name
    assert text.count("move consumer") == 2
    assert f"delete provider {HOST}_" in text
    assert cloud.state() == before


def test_adoption_moves_allocations_and_keeps_the_requests(cloud: Cloud) -> None:
    before = {s: cloud.allocations(s) for s in cloud.servers}
    cloud.adopt()
    client = cloud.client()
    assert client.get_provider(cloud.old_provider) is None
    with cloud.db.reader() as conn:
        held = select(ARQS, HANDLES.c.address).join(HANDLES, HANDLES.c.arq_id == ARQS.c.id)
        rows = {r.uuid: r for r in conn.execute(held)}
        profile = conn.execute(select(PROFILES)).one()
    assert (profile.name, profile.uuid) == ("fpga-dp", cloud.profile_uuid)
    for server, arq in cloud.servers.items():
        after = cloud.allocations(server)
        assert after[cloud.compute] == before[server][cloud.compute]  # VCPU, memory untouched
        assert _totals(after) == _totals(before[server])
        row = rows[arq]
        assert (row.state, row.instance_uuid, row.hostname) == ("Bound", server, HOST)
        assert after[row.device_rp_uuid] == {"CUSTOM_ACCELERATOR_FPGA": 1}
    handles = sorted(r.address for r in rows.values())
    assert handles[0].endswith(".1") and handles[1].endswith(".3")


def test_a_second_run_is_a_no_op(cloud: Cloud) -> None:
    cloud.adopt()
    after = cloud.state()
    again = cloud.plan()
    assert again.problems == [] and again.nothing_to_do, again.lines()
    adopt.apply(cloud.db, cloud.client(), cloud.syncer(), again)
    assert cloud.state() == after


class _DownAfter(adapter.Adapter):
    """Placement that goes away after ``writes`` allocation writes (an interruption)."""

    def __init__(self, inner: adapter.Adapter, writes: int) -> None:
        super().__init__(inner.session, service_type="placement")
        self.inner, self.left = inner, writes

    def request(self, url: str, method: str, **kwargs: Any) -> requests.Response:
        if method == "PUT" and url.startswith("/allocations/"):
            if self.left == 0:
                raise ks_exc.ConnectFailure("connection refused")
            self.left -= 1
        return self.inner.request(url, method, **kwargs)


def test_an_interrupted_run_finishes_when_run_again(cloud: Cloud) -> None:
    with pytest.raises(PlacementUnavailable):
        cloud.adopt(_DownAfter(cloud.placement, writes=1))
    moved = [s for s in cloud.servers if cloud.old_provider not in cloud.allocations(s)]
    assert len(moved) == 1  # the first server moved, the second not
    for server in cloud.servers:  # every server holds its accelerator somewhere
        assert _totals(cloud.allocations(server))["accelerator"] == 1
    the_plan = cloud.adopt()
    assert len(the_plan.moves) == 1
    assert cloud.client().get_provider(cloud.old_provider) is None
    for server in cloud.servers:
        assert _totals(cloud.allocations(server))["accelerator"] == 1
    assert cloud.plan().nothing_to_do


def _bind_started(cloud: Cloud) -> str:
    profile = cloud.cyborg.profile_id("fpga-dp")
    return cloud.cyborg.arq(profile, "BindStarted", hostname=HOST, instance_uuid=str(uuid.uuid4()))


def _unknown_device(cloud: Cloud) -> str:
    cloud.cyborg.device(HOST, "0000:ee:00.0", name=f"{HOST}_other", rc="FPGA", traits=[], total=1)
    cloud.client().create_provider(adopt_rp(f"{HOST}_other"), f"{HOST}_other", cloud.compute)
    return "0000:ee:00.0"


def _unexplained(cloud: Cloud) -> str:
    stranger = str(uuid.uuid4())
    allocate(cloud.placement, stranger, {cloud.old_provider: {"FPGA": 1}})
    return stranger


@pytest.mark.parametrize(
    "make, named",
    [
        (_bind_started, "a bind is in progress"),
        (_unknown_device, "no Acceleron agent reports it"),
        (_unexplained, "its bound requests explain nothing"),
    ],
)
def test_what_cannot_be_mapped_stops_it_before_any_change(
    cloud: Cloud, make: Callable[[Cloud], str], named: str
) -> None:
    item = make(cloud)
    before = cloud.state()
    the_plan = cloud.plan()
    assert any(item in p and named in p for p in the_plan.problems), the_plan.problems
    with pytest.raises(adopt.AdoptionRefused) as refused:
        adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    assert item in refused.value.message
    assert cloud.state() == before


# --- issue 43: the operator's second pass -------------------------------------------------


def _groups_of(cloud: Cloud, name: str) -> Any:
    with cloud.db.reader() as conn:
        return conn.execute(select(PROFILES.c.groups).where(PROFILES.c.name == name)).scalar_one()


def test_a_run_after_cyborg_changed_adopts_what_is_new_with_the_same_renames(
    cloud: Cloud,
) -> None:
    """After an adoption, Cyborg gets a new profile and a request from it: the next run
    creates the profile with the classes and traits Acceleron publishes and adopts the
    request; the run after it has nothing to do."""
    cloud.adopt()
    plain, _ = cloud.cyborg.profile("fpga-plain", [{"resources:FPGA": "1"}])
    cloud.cyborg.profile(
        "fpga-again", [{"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}]
    )
    new = cloud.cyborg.arq(plain, "Initial", project_id="p2")
    second = cloud.plan()
    assert second.problems == [], second.problems
    text = "\n".join(second.lines())
    assert "create fpga-plain" in text and f"adopt {new} Initial" in text, text
    assert not any(a.done for a in second.arqs if a.uuid == new)
    adopt.apply(cloud.db, cloud.client(), cloud.syncer(), second)
    assert _groups_of(cloud, "fpga-plain") == [{"resources:CUSTOM_ACCELERATOR_FPGA": "1"}]
    assert _groups_of(cloud, "fpga-again") == [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}
    ]
    with cloud.db.reader() as conn:
        row = conn.execute(select(ARQS).where(ARQS.c.uuid == new)).one()
    assert (row.state, row.project_id, row.resource_class) == (
        "Initial",
        "p2",
        "CUSTOM_ACCELERATOR_FPGA",
    )
    assert cloud.plan().nothing_to_do


def test_a_run_with_nothing_to_do_prints_only_true_diffs(cloud: Cloud) -> None:
    """A profile adopted earlier shows what Acceleron has, not Cyborg's names again."""
    cloud.adopt()
    again = cloud.plan()
    assert again.nothing_to_do and again.problems == []
    text = "\n".join(again.lines())
    (after,) = _groups_of(cloud, "fpga-dp")
    assert f"group 0: + {json.dumps(after)}" in text, text
    assert '+ {"resources:FPGA"' not in text, text


def test_a_placement_without_cyborg_s_providers_stops_the_first_run(cloud: Cloud) -> None:
    """Pointed at a Placement that lacks Cyborg's providers (a wrong endpoint or
    region), the first run adopts nothing and says why, before any change."""
    client = cloud.client()
    for server in cloud.servers:
        client.delete_allocations(server)
    client.delete_provider(cloud.old_provider)
    before = cloud.state()
    the_plan = cloud.plan()
    assert any(cloud.old_provider in p and "is not in Placement" in p for p in the_plan.problems), (
        the_plan.problems
    )
    with pytest.raises(adopt.AdoptionRefused):
        adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    assert cloud.state() == before


def test_a_bind_cyborg_left_unfinished_is_adopted_unbound_with_its_reason(
    cloud: Cloud,
) -> None:
    """A request in BindStarted for longer than Nova waits for a bind (a conductor that
    stopped mid-bind leaves it there for ever) is adopted Unbound, holding nothing, with
    the reason; a younger one stops the run (it may still end)."""
    long_ago = utcnow().replace(microsecond=0) - dt.timedelta(hours=2)
    instance = str(uuid.uuid4())
    stuck = cloud.cyborg.arq(
        cloud.cyborg.profile_id("fpga-dp"),
        "BindStarted",
        hostname=HOST,
        instance_uuid=instance,
        created_at=long_ago,
    )
    the_plan = cloud.plan()
    assert the_plan.problems == [], the_plan.problems
    (step,) = [a for a in the_plan.arqs if a.uuid == stuck]
    assert (step.state, step.instance_uuid, step.handle) == ("Unbound", None, None)
    adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    with cloud.db.reader() as conn:
        row = conn.execute(select(ARQS).where(ARQS.c.uuid == stuck)).one()
    assert (row.state, row.instance_uuid, row.hostname) == ("Unbound", None, None)
    assert "left its bind unfinished" in row.failure_reason and instance in row.failure_reason
    young = adopt_plan.Settings(MAPPING, bind_timeout=3 * 3600)
    assert cloud.plan(young).nothing_to_do  # adopted now: the timeout no longer matters


def test_an_allocation_that_came_after_the_plan_stops_the_run(cloud: Cloud) -> None:
    """A server's allocation on Cyborg's provider grows between the plan and the moves:
    the run stops before moving it (the move would drop the new accelerator), and the
    next run names it."""
    the_plan = cloud.plan()
    server = next(iter(cloud.servers))
    read = cloud.client().get_consumer(server)
    grown = {**read.allocations, cloud.old_provider: {"FPGA": 2}}
    allocate(cloud.placement, server, grown, generation=read.generation)
    with pytest.raises(adopt.AdoptionFailed) as failed:
        adopt.apply(cloud.db, cloud.client(), cloud.syncer(), the_plan)
    assert server in failed.value.message and "after the plan was read" in failed.value.message
    assert cloud.allocations(server)[cloud.old_provider] == {"FPGA": 2}
    again = cloud.plan()
    assert any(server in p and "{'FPGA': 2}" in p for p in again.problems), again.problems


def test_a_bound_request_keeps_its_attach_handle_uuid_and_creation_time(cloud: Cloud) -> None:
    cyborg_arqs = core_table(
        "extended_accelerator_requests",
        column("uuid"),
        column("created_at"),
        column("attach_handle_id"),
    )
    with cloud.cyborg.engine.connect() as conn:
        theirs = {r.uuid: r for r in conn.execute(select(cyborg_arqs))}
    cloud.adopt()
    held = select(ARQS.c.uuid, ARQS.c.created_at, HANDLES.c.uuid.label("handle")).join(
        HANDLES, HANDLES.c.arq_id == ARQS.c.id
    )
    with cloud.db.reader() as conn:
        mine = {r.uuid: r for r in conn.execute(held)}
    assert set(mine) == set(cloud.servers.values())
    for arq, row in mine.items():
        assert row.created_at == theirs[arq].created_at
        assert row.handle == cloud.cyborg.handle_uuid(theirs[arq].attach_handle_id)


def test_every_change_is_logged(cloud: Cloud, caplog: pytest.LogCaptureFixture) -> None:
    """Each change the adoption makes goes to the service's log, not only to the
    terminal: the same lines, from acceleron.service.adopt."""
    said: list[str] = []
    with caplog.at_level(logging.INFO, logger="acceleron.service.adopt"):
        adopt.apply(cloud.db, cloud.client(), cloud.syncer(), cloud.plan(), say=said.append)
    logged = [r.getMessage() for r in caplog.records if r.name == "acceleron.service.adopt"]
    assert len(said) >= 7  # profile, reserve, rename, publish, 2 requests, 2 moves, delete
    assert logged == [f"Adopting Cyborg: {line}" for line in said]


def test_cyborg_s_schema_is_read_and_others_are_refused(cloud: Cloud) -> None:
    assert cyborg_db.read_cyborg(cloud.cyborg.url).schema in cyborg_db.SCHEMAS
    with cloud.cyborg.schema("4cc1d79978fc"), pytest.raises(InvalidInput) as older:
        cyborg_db.read_cyborg(cloud.cyborg.url)
    assert "4cc1d79978fc" in older.value.message and "cyborg-dbsync upgrade" in older.value.message
    with cloud.cyborg.schema("0123456789ab"), pytest.raises(InvalidInput) as newer:
        cyborg_db.read_cyborg(cloud.cyborg.url)
    assert "does not know" in newer.value.message and "6c77bd6afea5" in newer.value.message
