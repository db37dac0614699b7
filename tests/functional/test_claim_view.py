"""Claims that choose from Acceleron's own view and write one ``PUT /allocations``
(service.claim_view), against the real Placement (in-process) on every database
backend: no candidate query while the view is right; Placement's refusal (409) of a
choice the view made falls back to the candidate query; a view known to be behind is
not used until Placement's answer shows it right again; and under 32 concurrent claims
for 4 free handles, with Nova allocating on the same provider at the same time, no
capacity is given twice. A class nothing provides is refused in its own words."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from keystoneauth1 import adapter
from oslo_config import cfg
from sqlalchemy import func, null, select, update

from acceleron.db.models import AcceleratorRequest, AttachHandle, Claim, Deployable, Host, table
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.exceptions import AcceleronError, AllocationConflict, NoCapacity, NotProvided
from acceleron.placement.batch import Writes
from acceleron.placement.client import PlacementClient
from acceleron.report import HostReport
from acceleron.service import claim_view, claims, device_profiles, inventory
from acceleron.service.placement import options_from_conf
from acceleron.service.publish import Syncer
from tests.fixtures.arqs import ADMIN, HOST, held
from tests.fixtures.placement import CountingAdapter

DEPLOYABLES, HANDLES, CLAIMS = table(Deployable), table(AttachHandle), table(Claim)
ARQS, HOSTS = table(AcceleratorRequest), table(Host)
QAT = "CUSTOM_ACCELERATOR_QAT"
CANDIDATES = "/allocation_candidates"

pytestmark = pytest.mark.placement


@pytest.fixture
def pool(db: Database, published: Any) -> str:
    """The provider of host-1's QAT VF pool (4 handles), and a profile "qat" of one."""
    device_profiles.create(db, name="qat", groups=[{f"resources:{QAT}": "1"}])
    with db.reader() as conn:
        return str(conn.execute(select(DEPLOYABLES.c.uuid)
                                .where(DEPLOYABLES.c.kind == "vf_pool")).scalar_one())  # fmt: skip


def claim(
    db: Database,
    conf: cfg.ConfigOpts,
    counted: adapter.Adapter,
    consumer: str | None = None,
    writes: Writes | None = None,
) -> claims.ClaimRecord:
    client = PlacementClient(counted)
    if writes is not None:
        client.batching(writes)
    return claims.make(db, client, ADMIN, "qat", consumer or str(uuid.uuid4()),
                       options=options_from_conf(conf))  # fmt: skip


def nova(placement: adapter.Adapter, pool: str, consumer: str, amount: int) -> None:
    """Nova's allocation of ``amount`` QAT on the pool (a new consumer, or a changed one)."""
    client = PlacementClient(placement)
    now = client.get_consumer(consumer)
    wanted = {pool: {QAT: amount}} if amount else {}
    if now.generation is None:
        client.put_allocations(consumer, wanted, project_id="p1", user_id="u1")
    else:
        client.replace_allocations(consumer, now, wanted)


def compute_node(db: Database) -> str:
    """host-1's compute node provider: the root of its tree, as the view reads it."""
    with db.reader() as conn:
        found = conn.execute(select(HOSTS.c.rp_uuid).where(HOSTS.c.hostname == HOST)).scalar_one()
    return str(found)


def used(placement: adapter.Adapter, pool: str) -> int:
    return PlacementClient(placement).get_usages(pool).get(QAT, 0)


def test_a_claim_allocates_from_acceleron_s_view_without_the_candidate_query(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    counted = CountingAdapter(placement)
    made = [claim(db, conf, counted) for _ in range(4)]
    assert counted.count("GET", CANDIDATES) == 0
    assert counted.count("PUT", "/allocations/") == 4
    assert [held(placement, m.consumer) for m in made] == [{pool: {QAT: 1}}] * 4
    assert all(m.state == "bound" and len(m.arqs) == 1 for m in made)
    with pytest.raises(NoCapacity) as full:  # the view says full: Placement asked
        claim(db, conf, counted)
    assert "free" in full.value.message and not isinstance(full.value, NotProvided)
    assert counted.count("GET", CANDIDATES) >= 1 and counted.count("PUT", "/allocations/") == 4


def test_a_choice_placement_refuses_falls_back_to_the_candidate_query_and_a_stale_view_waits(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    """Nova holds the whole pool; Acceleron's view does not know. The claim's own choice
    is refused (409), the candidate query finds nothing free: 409, nothing left behind.
    The view is then stale there: the next claims ask Placement, until its answer shows
    the view right again; then claims choose from the view once more."""
    nova(placement, pool, instance := str(uuid.uuid4()), 4)
    counted = CountingAdapter(placement)
    consumer = str(uuid.uuid4())
    with pytest.raises(NoCapacity):
        claim(db, conf, counted, consumer)
    assert counted.count("PUT", f"/allocations/{consumer}") == 1  # the view's choice, refused
    assert counted.count("GET", CANDIDATES) >= 1  # then Placement's query
    assert held(placement, consumer) == {}
    with db.reader() as conn:
        assert conn.execute(select(func.count()).select_from(CLAIMS)).scalar() == 0
    nova(placement, pool, instance, 2)  # Nova lets two go: the view still counts none
    counted.reset()
    first = claim(db, conf, counted)
    assert counted.count("GET", CANDIDATES) == 1  # stale: asked at once, no refused PUT
    assert counted.count("PUT", "/allocations/") == 1
    assert held(placement, first.consumer) == {pool: {QAT: 1}} and used(placement, pool) == 3
    nova(placement, pool, instance, 0)  # Nova's gone: Placement's answer matches the view
    counted.reset()
    claim(db, conf, counted)
    assert counted.count("GET", CANDIDATES) == 1  # still stale: this answer settles it
    counted.reset()
    claim(db, conf, counted)
    assert counted.count("GET", CANDIDATES) == 0  # the view again
    assert used(placement, pool) == 3


def test_a_claim_being_released_holds_its_unit_in_the_view_until_placement_lets_it_go(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    """A release ends the claim's requests first, then drops its allocation: between the
    two, its unit is still Placement's, and the view counts it so. A claim meanwhile is
    refused without a write Placement would refuse (which marked the view stale)."""
    made = [claim(db, conf, placement) for _ in range(4)]
    with db.writer() as conn:  # the first one's release, its requests gone
        conn.execute(update(CLAIMS).where(CLAIMS.c.consumer == made[0].consumer)
                     .values(state="releasing", step="placed"))  # fmt: skip
        gone = select(ARQS.c.id).where(ARQS.c.uuid.in_([a.uuid for a in made[0].arqs]))
        conn.execute(update(HANDLES).where(HANDLES.c.arq_id.in_(gone))
                     .values(arq_id=None, in_use=False))  # fmt: skip
    counted = CountingAdapter(placement)
    with pytest.raises(NoCapacity):
        claim(db, conf, counted)
    assert counted.count("PUT", "/allocations/") == 0
    assert not claim_view.read(db, [compute_node(db)]).stale


@pytest.mark.parametrize("batched", [False, True], ids=["alone", "batched"])
def test_32_concurrent_claims_for_4_handles_while_nova_allocates_give_nothing_twice(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str, batched: bool
) -> None:
    """Also with the claims' writes batched (``placement.batch``): a batch Placement
    refuses is written again one claim at a time."""
    writes = Writes() if batched else None
    start = threading.Barrier(36)
    made: list[str] = []
    novas: list[str] = []
    refused: list[AcceleronError] = []

    def claimer() -> None:
        start.wait()
        try:
            made.append(claim(db, conf, placement, writes=writes).consumer)
        except AcceleronError as error:
            refused.append(error)

    def instance() -> None:  # Nova: straight to Placement, as its scheduler does
        consumer = str(uuid.uuid4())
        start.wait()
        try:
            nova(placement, pool, consumer, 1)
            novas.append(consumer)
        except AllocationConflict:
            pass

    run([claimer] * 32 + [instance] * 4)
    assert len(made) + len(novas) == 4 == used(placement, pool)
    assert len(refused) == 32 - len(made)
    assert all(isinstance(e, NoCapacity) or "capacity" in e.message
               for e in refused), [e.message for e in refused]  # fmt: skip
    for consumer in made:
        assert held(placement, consumer) == {pool: {QAT: 1}}
    with db.reader() as conn:
        holders = conn.execute(select(func.count()).select_from(HANDLES)
                               .where(HANDLES.c.arq_id.is_not(None))).scalar()  # fmt: skip
        left = conn.execute(select(CLAIMS.c.consumer)).scalars().all()
    assert holders == len(made) and sorted(left) == sorted(made)


def run(targets: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=target) for target in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not any(thread.is_alive() for thread in threads)


def test_a_class_nothing_provides_is_refused_as_such(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    """FPGA is a standard class Placement knows, but this cloud publishes custom classes:
    nothing provides it, however long one waits (not "all in use")."""
    device_profiles.create(db, name="std", groups=[{"resources:FPGA": "1"}])
    with pytest.raises(NotProvided) as refused:
        claims.make(db, PlacementClient(placement), ADMIN, "std", str(uuid.uuid4()),
                    options=options_from_conf(conf))  # fmt: skip
    assert refused.value.message.startswith("No host provides FPGA: ")
    assert "in use" not in refused.value.message


def test_a_stale_mark_is_every_api_process_s(
    db: Database,
    database_url: str,
    conf: cfg.ConfigOpts,
    placement: adapter.Adapter,
    pool: str,
) -> None:
    """Another API process (a process of its own, on the same database) marks the pool
    stale: this one's view sees it, and claims here ask Placement's candidate query
    about it at once; an answer showing the view right settles it for both."""
    root = compute_node(db)
    marked = subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, database_url, root, pool],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert marked.returncode == 0, marked.stderr
    assert marked.stdout.split() == ["before:", "after:", pool]  # its own view saw it too
    assert claim_view.read(db, [root]).stale == {pool}
    counted = CountingAdapter(placement)
    claim(db, conf, counted)  # asked at once: no PUT Placement would refuse first
    assert counted.count("GET", CANDIDATES) == 1 and counted.count("PUT", "/allocations/") == 1
    assert not claim_view.read(db, [root]).stale  # the answer matched the view: settled
    other = Database(database_url)
    try:
        assert not claim_view.read(other, [root]).stale
    finally:
        other.dispose()


# A second API process: its view of the host before and after it marks the pool stale.
OTHER_PROCESS = """
import sys
from acceleron.db.session import Database
from acceleron.service import claim_view
url, root, pool = sys.argv[1:]
db = Database(url)
print("before:", *sorted(claim_view.read(db, [root]).stale))
claim_view.mark_stale(db, [pool])
print("after:", *sorted(claim_view.read(db, [root]).stale))
db.dispose()
"""


def test_a_host_reported_again_is_read_as_its_sync_published_it_again(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    """What the sync published is recorded with the generation it published: a report
    that changes the host takes it out of the view until the sync has published the
    change, then the view reads the new record (the QAT card gone, its pool with it)."""
    root = compute_node(db)
    before = claim_view.read(db, [root]).summaries
    assert before[pool].resources[QAT].capacity == 4 and len(before) > 1
    devices = FakeDriver(conf, Path("/")).discover()
    inventory.reconcile(db, HostReport(HOST, "1", tuple(d for d in devices if d.type != "QAT")))
    assert claim_view.read(db, [root]).summaries == {}  # not in Placement yet
    syncer = Syncer(db, lambda: PlacementClient(placement), options_from_conf(conf))
    syncer.sync_host(HOST)
    after = claim_view.read(db, [root]).summaries
    assert pool not in after and after == {rp: s for rp, s in before.items() if rp != pool}
    with db.reader() as conn:
        host = conn.execute(select(HOSTS).where(HOSTS.c.hostname == HOST)).one()
    assert host.published["generation"] == host.generation == host.synced_generation
    assert sorted(host.published["providers"]) == sorted(after)


def test_a_host_an_earlier_release_synced_is_recorded_by_the_verification(
    db: Database, conf: cfg.ConfigOpts, placement: adapter.Adapter, pool: str
) -> None:
    """An earlier release's sync recorded nothing for the view: the view leaves the host
    to Placement's query until the verification, with nothing else to repair, records
    what is published."""
    root = compute_node(db)
    with db.writer() as conn:
        conn.execute(update(HOSTS).values(published=null()))
    assert claim_view.read(db, [root]).summaries == {}
    Syncer(db, lambda: PlacementClient(placement), options_from_conf(conf)).verify()
    assert claim_view.read(db, [root]).summaries[pool].resources[QAT].capacity == 4
