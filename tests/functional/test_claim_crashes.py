"""Claims killed at random points: the all-in-one is killed (SIGKILL) while clients claim
and release QAT VFs and vGPUs, restarted, and recovery runs (the API's start, then a
reconciler passes asked for until the killed process's claims are ended: once their
lease, ``[claims] timeout`` of the database's time, has passed). Then the audit: no claim stuck
(being made or released), no request that no claim explains, no handle held but by a
live claim's request, and no Placement allocation but a live claim's.

Bounded: ``TRIALS`` kills per backend, each after a random number of claims sent (a
seeded generator), on SQLite and PostgreSQL (each a few seconds on 2 cores).
"""

from __future__ import annotations

import json
import random
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine, text

from tests.fixtures import databases
from tests.fixtures.allinone import LATEST, AllInOne
from tests.fixtures.waiting import wait_for

pytestmark = pytest.mark.slow
TRIALS = 3
LEASE = 10  # [claims] timeout (its least): how long a killed process's claims wait
CLIENTS = 6
PLACEMENT = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
PROFILES = {
    "crash-qat": {"resources:CUSTOM_ACCELERATOR_QAT": "1"},
    "crash-vgpu": {
        "resources:CUSTOM_ACCELERATOR_VGPU": "1",
        "trait:CUSTOM_NVIDIA_1EB8_T4_1B": "required",
    },
}
BACKENDS = [b for b in ("sqlite", "postgresql") if b in databases.selected_backends()]


@pytest.fixture(params=BACKENDS)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'acceleron.sqlite'}"
        return
    try:
        url = databases.create_server_database(request.param)
    except Exception as error:  # the server is not there
        if request.param in databases.demanded_backends():
            pytest.fail(f"{request.param} server not reachable: {error}")
        pytest.skip(f"{request.param} server not reachable: {error}")
    try:
        yield url
    finally:
        databases.drop_server_database(request.param, url)


class Clients:
    """``CLIENTS`` threads claiming (and releasing half of what they claimed) until the
    server goes away; ``killed_after(n)`` returns once ``n`` claims were sent."""

    def __init__(self, url: str, rng: random.Random) -> None:
        self.url = url
        self.seeds = [rng.random() for _ in range(CLIENTS)]
        self.sent = 0
        self.answers: Counter[int] = Counter()
        self.changed = threading.Condition()
        self.threads = [threading.Thread(target=self._run, args=(s,)) for s in self.seeds]

    def _run(self, seed: float) -> None:
        rng = random.Random(seed)
        session = requests.Session()
        try:
            while True:
                consumer = str(uuid.uuid4())
                with self.changed:
                    self.sent += 1
                    self.changed.notify_all()
                body = {
                    "device_profile_name": rng.choice(sorted(PROFILES)),
                    "consumer_uuid": consumer,
                }
                made = session.post(f"{self.url}/v2/claims", json=body, headers=LATEST, timeout=30)
                self.answers[made.status_code] += 1
                if made.status_code == 201 and rng.random() < 0.5:
                    session.delete(f"{self.url}/v2/claims/{consumer}", headers=LATEST, timeout=30)
        except requests.RequestException:  # killed
            return

    def killed_after(self, claims: int) -> None:
        for thread in self.threads:
            thread.start()
        with self.changed:
            self.changed.wait_for(lambda: self.sent >= claims, timeout=60)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=60)


def audit(server: AllInOne, database: str) -> Counter[str]:
    """What is wrong: claims stuck, requests orphaned, handles and allocations lost."""
    engine = create_engine(database)
    try:
        with engine.connect() as conn:
            claims = conn.execute(text("SELECT * FROM claims")).mappings().all()
            arqs = conn.execute(
                text("SELECT uuid, state, instance_uuid FROM accelerator_requests")
            ).all()
            held = (
                conn.execute(
                    text(
                        "SELECT r.instance_uuid FROM attach_handles h LEFT JOIN "
                        "accelerator_requests r ON r.id = h.arq_id "
                        "WHERE h.arq_id IS NOT NULL"
                    )
                )
                .scalars()
                .all()
            )
    finally:
        engine.dispose()
    live = {c["consumer"] for c in claims if c["state"] in ("binding", "bound", "failed")}
    theirs = {u for c in claims for u in _listed(c.get("requests"))}
    found: Counter[str] = Counter()
    found["stuck claims"] = sum(c["state"] not in ("binding", "bound", "failed") for c in claims)
    found["orphaned requests"] = sum(
        a.instance_uuid not in live and a.uuid not in theirs for a in arqs
    )
    found["lost handles"] = sum(instance not in live for instance in held)
    providers = requests.get(
        f"{server.url}/placement/resource_providers", headers=PLACEMENT, timeout=30
    ).json()["resource_providers"]
    for rp in providers:
        allocations = requests.get(
            f"{server.url}/placement/resource_providers/{rp['uuid']}/allocations",
            headers=PLACEMENT,
            timeout=30,
        ).json()["allocations"]
        found["lost allocations"] += sum(consumer not in live for consumer in allocations)
    return found


def _listed(value: Any) -> list[str]:
    """A JSON list column read without its type (SQLite gives the text)."""
    return list(json.loads(value) if isinstance(value, str) else value or [])


def reconciled(server: AllInOne) -> bool:
    """Two reconciler passes (a leak is freed when two passes saw it)."""
    for _ in range(2):
        passed = requests.post(
            f"{server.url}/v2/placement/reconcile", headers=LATEST, json={}, timeout=60
        )
        assert passed.status_code == 200, passed.text
    return True


def release_all(server: AllInOne, database: str) -> None:
    engine = create_engine(database)
    try:
        with engine.connect() as conn:
            consumers = conn.execute(text("SELECT consumer FROM claims")).scalars().all()
    finally:
        engine.dispose()
    for consumer in consumers:
        requests.delete(f"{server.url}/v2/claims/{consumer}", headers=LATEST, timeout=30)


def test_claims_killed_at_random_points_leave_nothing_stuck(database: str, tmp_path: Path) -> None:
    rng = random.Random(26)
    config = {
        "OS_DATABASE__CONNECTION": database,
        "OS_RECONCILER__INTERVAL": "0",
        "OS_RECONCILER__GRACE": "0",
        "OS_CLAIMS__TIMEOUT": str(LEASE),
        # A process killed mid-sync holds its host this long: the restart waits it out.
        "OS_PLACEMENT__SYNC_LEASE": "5",
    }
    server = AllInOne(tmp_path / "aio", "crash-host", config)
    totals: Counter[str] = Counter()
    answers: Counter[int] = Counter()
    try:
        server.start()
        for name, group in PROFILES.items():
            made = requests.post(
                f"{server.url}/v2/device_profiles",
                headers=LATEST,
                timeout=30,
                json=[{"name": name, "groups": [group]}],
            )
            assert made.status_code == 201, made.text
        for _ in range(TRIALS):
            clients = Clients(server.url, rng)
            clients.killed_after(rng.randint(2, 14))
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=30)
            clients.join()
            answers.update(clients.answers)
            server.start()
            # The killed process's claims are ended once their lease has passed.
            wait_for(
                lambda: reconciled(server) and not audit(server, database)["stuck claims"],
                LEASE + 60,
                interval=0.5,
            )
            reconciled(server)  # a leak is freed when two passes saw it
            totals.update(audit(server, database))
            release_all(server, database)
    finally:
        if server.process is not None:
            server.process.kill()
            server.process.wait(timeout=30)
    figures = f"{TRIALS} kills, answers {dict(answers)}, after recovery {dict(totals)}"
    assert answers[201] > 0, figures
    assert sum(totals.values()) == 0, figures
