"""A rolling upgrade under load (``make e2e-upgrade``): the reference cloud starts with
Acceleron's previous release (``python -m cloud up --release``: its files and its own
locked virtualenv), then is upgraded to the checkout's the way docs/install.md
("Upgrades") tells an operator to: ``acceleron db upgrade --expand`` while the old
release serves, API replica 1, replica 2, the agent of each compute, then ``acceleron db
upgrade --contract``; ``acceleron status upgrade check`` before each step.

All along, servers with accelerators are booted and deleted through Nova (a QAT VF, a
vGPU, an FPGA region programmed from Glance with one of two bitstreams in turn) and
claims are made and released through the API. Between two steps the load runs until
every loop has finished a round begun after the step: old and new APIs serve side by
side (and old agents beside a new API) for at least a boot and a claim each.

The tallies are printed; the test asks for 0 failed boots, 0 failed claims, no 5xx
answered by an API replica (its ``acceleron_api_requests_total``, read before it stops
and at the end), no request refused on the way, no round stuck, and nothing left behind.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openstack
import pytest
import requests
from cloud.base import COMPUTES, Cloud
from cloud.releases import manage, upgrade
from tests.fixtures.e2e import (
    LATEST,
    REGION_B,
    WAIT,
    arqs,
    check_gone,
    glance_bitstream,
    trait,
    wait_status,
)

CLAIMS = {"OpenStack-API-Version": "accelerator 2.12"}
QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
VGPU = {"resources:CUSTOM_ACCELERATOR_VGPU": "1", "trait:CUSTOM_GPU_NVIDIA_T4": "required"}
MIG = {"resources:CUSTOM_ACCELERATOR_MIG": "1"}
FUNCTIONS = ("5a1f0c2e9b8d4e6fa7c3b1d2e4f60718", "6b2e1d3f0c9e4f7ab8d4c2e3f5071829")
STEP_WAIT = 420.0  # seconds every loop may take to finish a round after a step
REPLICAS = ("acceleron-api-1", "acceleron-api-2")


@dataclass
class Load:
    """The loops' rounds and what they were answered."""

    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    rounds: dict[str, int] = field(default_factory=dict)  # loop -> rounds done
    since: dict[str, float] = field(default_factory=dict)  # loop -> its last round's start
    failed: list[str] = field(default_factory=list)  # boots and claims that failed
    stuck: list[str] = field(default_factory=list)  # rounds that did not end in time
    refused: list[str] = field(default_factory=list)  # 5xx and lost connections seen here

    def done(self, loop: str, started: float) -> None:
        with self.lock:
            self.rounds[loop] = self.rounds.get(loop, 0) + 1
            self.since[loop] = started

    def note(self, kind: list[str], what: str) -> None:
        with self.lock:
            kind.append(what)

    def after(self, moment: float) -> bool:
        """Whether every loop has finished a round begun after ``moment``."""
        with self.lock:
            return bool(self.since) and all(s > moment for s in self.since.values())


def connection(user: str) -> Any:
    return openstack.connect(cloud=f"acceleron-{user}")


def boots(load: Load, name: str, flavors: list[str], image: str) -> None:
    """Boot a server with the next flavor, check its requests Bound, delete it; again."""
    member, admin = connection("member"), connection("admin")
    turn = 0
    while not load.stop.is_set():
        started, flavor = time.monotonic(), flavors[turn % len(flavors)]
        turn += 1
        try:
            server = member.compute.create_server(
                name=f"upgrade-{uuid.uuid4().hex[:6]}",
                flavor_id=member.compute.find_flavor(flavor, ignore_missing=False).id,
                image_id=image,
                networks="none",
            )
        except openstack.exceptions.SDKException as error:
            load.note(load.refused, f"{name}: server create: {error}")
            return
        try:
            found = wait_status(admin, server.id, "ACTIVE")
            held = arqs(admin, server.id)
            if found.status != "ACTIVE" or {a["state"] for a in held} != {"Bound"}:
                load.note(
                    load.failed,
                    f"{name} {server.id}: {found.status} {found.fault} "
                    f"{[a['state'] for a in held]}",
                )
            member.compute.delete_server(server.id)
            member.compute.wait_for_delete(server, wait=WAIT)
        except (AssertionError, openstack.exceptions.ResourceTimeout) as error:
            load.note(load.stuck, f"{name} {server.id}: {error}")
            return
        except openstack.exceptions.SDKException as error:
            load.note(load.refused, f"{name} {server.id}: {error}")
            return
        load.done(name, started)


def claims(load: Load, profile: str) -> None:
    """Claim a MIG slice for a new consumer, follow the claim to ``bound``, release it;
    again."""
    member = connection("member")

    def send(method: str, path: str, **kwargs: Any) -> Any:
        try:
            answer = member.accelerator.request(
                path, method, headers=CLAIMS, raise_exc=False, **kwargs
            )
        except openstack.exceptions.SDKException as error:  # no answer: the connection lost
            load.note(load.refused, f"{method} {path}: {error}")
            return None
        if answer.status_code >= 500:
            load.note(load.refused, f"{method} {path}: {answer.status_code} {answer.text}")
        return answer

    while not load.stop.is_set():
        started, consumer = time.monotonic(), str(uuid.uuid4())
        body = {"device_profile_name": profile, "consumer_uuid": consumer}
        made = send("POST", "/claims", json=body)
        if made is None or made.status_code != 201:
            load.note(load.failed, f"claim {consumer}: {getattr(made, 'text', 'no answer')}")
            return
        state, deadline = made.json()["state"], started + WAIT
        while state == "binding" and time.monotonic() < deadline:
            time.sleep(0.5)
            shown = send("GET", f"/claims/{consumer}")
            state = shown.json()["state"] if shown is not None and shown.ok else state
        if state != "bound":
            load.note(
                load.failed if state == "failed" else load.stuck, f"claim {consumer}: {state}"
            )
        released = send("DELETE", f"/claims/{consumer}")
        if released is None or released.status_code != 204:
            load.note(load.stuck, f"claim {consumer}: release {getattr(released, 'text', '')}")
            return
        load.done("claims", started)


def server_errors(cloud: Cloud, name: str) -> int:
    """The 5xx answers the replica ``name`` counted since it started."""
    answer = requests.get(f"{cloud.url(name)}/metrics", timeout=30)
    assert answer.status_code == 200, answer.text
    counted = [
        line
        for line in answer.text.splitlines()
        if line.startswith("acceleron_api_requests_total{")
    ]
    assert counted, f"{name} counted no request"
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in counted if 'status="5' in line)


def api_version(cloud: Cloud, name: str) -> str:
    """The release the replica ``name`` runs (its OpenAPI document's version)."""
    answer = requests.get(f"{cloud.url(name)}/openapi.json", timeout=30)
    version: str = answer.json()["info"]["version"] if answer.ok else f"? {answer.status_code}"
    return version


def say(line: str) -> None:
    """A line of the tallies (``make e2e-upgrade`` runs pytest with ``-s``)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def check(step: str) -> None:
    """``acceleron status upgrade check`` (the checkout's), as before each step; its
    exit status and the lines that are not its table's frame."""
    done = manage("status", "upgrade", "check")
    assert done.returncode in (0, 1), f"{step}: {done.stdout}{done.stderr}"  # no Failure
    lines = [line.strip("| ").rstrip() for line in done.stdout.splitlines()]
    said = [line for line in lines if line and not set(line) <= set("+-=")]
    say(f"  status upgrade check before {step}: exit {done.returncode}: {' / '.join(said)}")


@pytest.fixture
def kinds(admin: Any) -> Iterator[Callable[[dict[str, str]], str]]:
    """Makes a device profile of one group and a flavor asking for it (through the APIs,
    as the admin: the CLI costs seconds of CPU a call); their name. Removed at the end."""
    made: list[tuple[str, str]] = []

    def make(group: dict[str, str]) -> str:
        name = f"upgrade-{uuid.uuid4().hex[:8]}"
        answer = admin.accelerator.post(
            "/device_profiles",
            headers=LATEST,
            raise_exc=False,
            json=[{"name": name, "groups": [group]}],
        )
        assert answer.status_code == 201, answer.text
        flavor = admin.compute.create_flavor(name=name, ram=64, vcpus=1, disk=1)
        admin.compute.create_flavor_extra_specs(flavor, {"accel:device_profile": name})
        made.append((flavor.id, name))
        return name

    yield make
    for flavor, name in made:
        admin.compute.delete_flavor(flavor, ignore_missing=True)
        admin.accelerator.delete(f"/device_profiles/{name}", headers=LATEST, raise_exc=False)


@pytest.fixture
def release(cloud: Cloud) -> Iterator[str]:
    if not cloud.release:
        pytest.skip(
            "the cloud runs the checkout's Acceleron: `make e2e-upgrade` starts "
            "one on the previous release"
        )
    names = [*REPLICAS, *(f"agent-{h}" for h in COMPUTES)]
    if not any(cloud.release in cloud.processes[n].argv[0] for n in names):
        pytest.skip("the cloud's Acceleron has been upgraded already")
    yield cloud.release


def test_rolling_upgrade_under_load(
    cloud: Cloud,
    release: str,
    admin: Any,
    kinds: Callable[[dict[str, str]], str],
    image: str,
    tmp_path: Path,
) -> None:
    fpga = [
        kinds(
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                f"trait:{trait('REGION', REGION_B)}": "required",
                "trait:CUSTOM_PROGRAMMABLE": "required",
                "accel:bitstream_id": glance_bitstream(tmp_path, f, REGION_B, REGION_B),
            }
        )
        for f in FUNCTIONS
    ]
    qat, vgpu, mig = kinds(QAT), kinds(VGPU), kinds(MIG)
    loops: dict[str, Callable[[Load], None]] = {
        "qat": lambda load: boots(load, "qat", [qat], image),
        "vgpu": lambda load: boots(load, "vgpu", [vgpu], image),
        "fpga": lambda load: boots(load, "fpga", fpga, image),  # programs at each boot
        "claims": lambda load: claims(load, mig),
    }
    processes = [*REPLICAS, *(f"agent-{host}" for host in COMPUTES)]
    steps: list[tuple[str, Callable[[], None]]] = [
        (f"the {release} release alone", lambda: None),
        ("db upgrade --expand", lambda: schema("--expand")),
        *[(name, upgrading(cloud, name)) for name in processes],
        ("db upgrade --contract", lambda: schema("--contract")),
    ]
    load = Load(since=dict.fromkeys(loops, -1.0))  # every loop, before its first round
    threads = [
        threading.Thread(target=loop, args=(load,), name=name) for name, loop in loops.items()
    ]
    errors = dict.fromkeys(REPLICAS, 0)  # 5xx counted by the replicas' old processes
    began = time.monotonic()
    say(f"\nrolling upgrade from {release}:")
    for thread in threads:
        thread.start()
    try:
        for step, act in steps:
            check(step)
            if step in REPLICAS:
                errors[step] += server_errors(cloud, step)
            moment = time.monotonic()
            act()
            versions = {n: api_version(cloud, n) for n in REPLICAS}
            deadline = time.monotonic() + STEP_WAIT
            while not load.after(moment) and time.monotonic() < deadline:
                if not all(thread.is_alive() for thread in threads):
                    break  # a loop ended on what it was answered: the asserts say what
                time.sleep(1)
            say(
                f"  {step}: done at {moment - began:.0f} s; APIs {versions}; "
                f"rounds {dict(load.rounds)} by {time.monotonic() - began:.0f} s"
            )
            assert load.after(moment), (
                f"the load made no round after {step}: {load.failed, load.refused, load.stuck}"
            )
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=WAIT + 60)
    for name in REPLICAS:
        errors[name] += server_errors(cloud, name)
    check("the end")
    left = [t.name for t in threads if t.is_alive()]
    say(
        f"  tallies: rounds {dict(load.rounds)}; failed {len(load.failed)}; 5xx answered "
        f"{sum(errors.values())}; refused or lost here {len(load.refused)}; stuck "
        f"{len(load.stuck) + len(left)}; {time.monotonic() - began:.0f} s"
    )
    assert {n: api_version(cloud, n) for n in REPLICAS} == dict.fromkeys(REPLICAS, current())
    assert (load.failed, load.refused, load.stuck, left) == ([], [], [], [])
    assert errors == dict.fromkeys(REPLICAS, 0)
    assert all(load.rounds.get(name, 0) >= len(steps) for name in loops), load.rounds
    check_gone(admin)
    listed = admin.accelerator.get("/accelerator_requests", headers=LATEST).json()["arqs"]
    assert listed == []


def upgrading(cloud: Cloud, name: str) -> Callable[[], None]:
    return lambda: upgrade(cloud, name)


def schema(phase: str) -> None:
    """``acceleron db upgrade`` of one phase, with the checkout's release."""
    done = manage("db", "upgrade", phase)
    assert done.returncode == 0, f"{done.stdout}{done.stderr}"
    say(f"    {done.stdout.strip()}")


def current() -> str:
    import acceleron

    return acceleron.__version__
