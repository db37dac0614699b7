"""The end-to-end suite: real Keystone, Placement, Glance, Nova (two fake computes) and
Acceleron (two API replicas, an agent per compute), as ``make cloud`` starts them.

Run it with ``make e2e`` (it starts the cloud, runs this directory, stops the cloud) or,
against a cloud already up, ``ACCELERON_E2E=1 .venv/bin/pytest tests/e2e``. Everything is
driven as a user would: the ``openstack`` CLI and openstacksdk with the credentials in
``.cloud/run/clouds.yaml``. The tests run one after the other and each deletes what it
made: at the end of each, no accelerator request, allocation or attach handle is left.

Every test expects nested providers (``make cloud``) except those marked ``flat``
(tests/e2e/test_flat.py), which expect ``python -m cloud up --flat``; the others are
skipped against a cloud of the other kind. Those marked ``cyborg``
(tests/e2e/test_cyborg.py, ``make e2e-cyborg``) expect upstream Cyborg as the
accelerator service (``python -m cloud up --cyborg``): they run only there, and every
other test is skipped against such a cloud.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openstack
import pytest
from cloud.launcher import RUN, Cloud

from acceleron.drivers import gbs

LATEST = {"OpenStack-API-Version": "accelerator latest"}
OPENSTACK = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "openstack")
WAIT = 240.0  # seconds a server may take to become ACTIVE (or ERROR, or go away)
COMPUTES = ("compute-1", "compute-2")

# What the fake driver has on each compute (cloud/templates/inventory-compute-*.yaml).
REGION_A = "ce48969398f05f33946d560708be108a"  # region0: pre-programmed
REGION_B = "9926ab6d6c925a68aabca7d84c545738"  # region1: empty, programmable
GZIP = "d8424dc4a4a3c413f89e433683f9040b"  # held by compute-1's region0
NLB = "f7df405cbd7acf7222f144b0b93acd18"  # held by compute-2's region0
HOLDER = {GZIP: "compute-1", NLB: "compute-2"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "flat: needs a cloud started with `python -m cloud up --flat`"
    )
    config.addinivalue_line(
        "markers", "cyborg: needs upstream Cyborg's cloud: `python -m cloud up --cyborg`"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip what the running cloud's mode cannot run: the flat tests on a nested cloud,
    the rest on a flat one; the Cyborg tests anywhere but on a cloud running upstream
    Cyborg, and every other test there."""
    found = Cloud.load()
    if found is None or not found.running:
        return  # the ``cloud`` fixture says so
    here = Path(__file__).resolve().parent
    for item in items:
        if here not in item.path.resolve().parents:
            continue
        flat = item.get_closest_marker("flat") is not None
        cyborg = item.get_closest_marker("cyborg") is not None
        if cyborg or found.cyborg:
            if not found.cyborg:
                item.add_marker(pytest.mark.skip(reason="needs upstream Cyborg: "
                                                 "`python -m cloud up --cyborg`"))  # fmt: skip
            elif not cyborg:
                item.add_marker(pytest.mark.skip(reason="runs against Acceleron; the "
                                                 "cloud runs upstream Cyborg"))  # fmt: skip
        elif flat and found.nested:
            item.add_marker(pytest.mark.skip(reason="needs a flat cloud: "
                                             "`python -m cloud up --flat`"))  # fmt: skip
        elif not flat and not found.nested:
            item.add_marker(pytest.mark.skip(reason="expects nested providers; the cloud "
                                             "is flat (`python -m cloud up`)"))  # fmt: skip


def trait(kind: str, value: str) -> str:
    return f"CUSTOM_FPGA_INTEL_{kind}_{value.upper()}"


@pytest.fixture(scope="session")
def cloud() -> Cloud:
    found = Cloud.load()
    if found is None or not found.running:
        pytest.fail("No reference cloud runs: start one with `make cloud` (or use `make e2e`).")
    return found


@pytest.fixture(scope="session")
def admin(cloud: Cloud) -> openstack.connection.Connection:
    return openstack.connect(cloud="acceleron-admin")


@pytest.fixture(scope="session")
def member(cloud: Cloud) -> openstack.connection.Connection:
    return openstack.connect(cloud="acceleron-member")


def osc(*argv: str, user: str = "member", check: bool = True) -> Any:
    """The ``openstack`` CLI as ``user``: its JSON output (or text when not JSON); when
    it fails, its messages (or AssertionError when ``check``)."""
    done = subprocess.run(
        [OPENSTACK, "--os-cloud", f"acceleron-{user}", *argv],
        capture_output=True, text=True, timeout=300, check=False,
        env={"OS_CLIENT_CONFIG_FILE": str(RUN / "clouds.yaml"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if done.returncode != 0:
        if check:
            raise AssertionError(f"openstack {' '.join(argv)} failed: {done.stderr}{done.stdout}")
        return done.stderr + done.stdout
    try:
        return json.loads(done.stdout) if done.stdout.strip() else None
    except ValueError:
        return done.stdout + done.stderr


@pytest.fixture(scope="session")
def image(cloud: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A small public image to boot from (the fake driver never reads it)."""
    path = tmp_path_factory.mktemp("image") / "tiny.img"
    path.write_bytes(b"\0" * 1024)
    created = osc("image", "create", "--public", "--disk-format", "raw", "--container-format",
                  "bare", "--file", str(path), "-f", "json", f"e2e-{uuid.uuid4().hex[:6]}",
                  user="admin")  # fmt: skip
    yield created["id"]
    osc("image", "delete", created["id"], user="admin")


@dataclass
class Flavors:
    """Makes device profiles and flavors (as the admin), removes them at the end."""

    admin: openstack.connection.Connection
    made: list[tuple[str, str]]

    def make(self, groups: list[dict[str, str]], ram: int = 64) -> str:
        """A flavor asking for a new device profile with ``groups``; its name."""
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        argv = ["accelerator", "device", "profile", "create", name]
        for group in groups:
            argv += ["--group", ",".join(f"{k}={v}" for k, v in group.items())]
        osc(*argv, "-f", "json", user="admin")
        osc("flavor", "create", "--ram", str(ram), "--disk", "1", "--vcpus", "1",
            "--property", f"accel:device_profile={name}", name, "-f", "json",
            user="admin")  # fmt: skip
        self.made.append((name, name))
        return name

    def plain(self, ram: int = 64) -> str:
        name = f"e2e-plain-{uuid.uuid4().hex[:6]}"
        osc("flavor", "create", "--ram", str(ram), "--disk", "1", "--vcpus", "1", name,
            "-f", "json", user="admin")  # fmt: skip
        self.made.append((name, ""))
        return name

    def cleanup(self) -> None:
        for flavor, profile in self.made:
            osc("flavor", "delete", flavor, user="admin", check=False)
            if profile:
                osc("accelerator", "device", "profile", "delete", profile, user="admin",
                    check=False)  # fmt: skip


@pytest.fixture(scope="module")
def flavors(admin: openstack.connection.Connection) -> Iterator[Flavors]:
    made = Flavors(admin, [])
    yield made
    made.cleanup()


@pytest.fixture(autouse=True)
def no_server_left(admin: openstack.connection.Connection) -> Iterator[None]:
    """Whatever a test leaves (it failed half-way), the next one starts with no server."""
    yield
    left = [s.id for s in admin.compute.servers(all_projects=True)]
    if left:
        delete_and_wait(admin, *left)


# --- servers --------------------------------------------------------------------------


def boot(flavor: str, image: str, *extra: str, user: str = "member") -> dict[str, Any]:
    """``openstack server create`` (no network) without waiting; the server."""
    name = f"e2e-{uuid.uuid4().hex[:6]}"
    server: dict[str, Any] = osc("server", "create", "--flavor", flavor, "--image", image,
                                 "--nic", "none", *extra, "-f", "json", name,
                                 user=user)  # fmt: skip
    return server


def wait_status(conn: Any, server_id: str, *wanted: str, seconds: float = WAIT) -> Any:
    """The server once its status is one of ``wanted`` (ERROR ends the wait too) and no
    task runs on it."""
    deadline = time.monotonic() + seconds
    while True:
        server = conn.compute.get_server(server_id)
        if (server.status in wanted or server.status == "ERROR") and not server.task_state:
            return server
        if time.monotonic() > deadline:
            raise AssertionError(f"server {server_id} is {server.status}/{server.task_state} "
                                 f"after {seconds:.0f} s, not {wanted}")  # fmt: skip
        time.sleep(1)


def wait_migration(conn: Any, server_id: str, kind: str, seconds: float = WAIT) -> str:
    """The status of the server's newest ``kind`` migration (``evacuation``, ...) once
    Nova has ended it: ``done`` or ``completed`` (Nova's own signal that the server's
    host has moved), or ``failed``/``error``. A server's status is set part way: an
    evacuated server is SHUTOFF before Nova moves it to its new host."""
    deadline = time.monotonic() + seconds
    while True:
        response = conn.compute.get("/os-migrations", params={"instance_uuid": server_id},
                                    microversion="2.59")  # fmt: skip
        assert response.status_code == 200, response.text
        found = [m for m in response.json()["migrations"] if m["migration_type"] == kind]
        status = max(found, key=lambda m: m["id"])["status"] if found else "none yet"
        if status in ("done", "completed", "failed", "error"):
            return str(status)
        if time.monotonic() > deadline:
            raise AssertionError(f"the {kind} of {server_id} is {status} after {seconds:.0f} s")
        time.sleep(1)


def active(conn: Any, server_id: str) -> Any:
    server = wait_status(conn, server_id, "ACTIVE")
    assert server.status == "ACTIVE", f"{server_id}: {server.status}: {server.fault}"
    return server


def delete_and_wait(conn: Any, *server_ids: str, seconds: float = WAIT) -> None:
    for server_id in server_ids:
        conn.compute.delete_server(server_id, ignore_missing=True)
    deadline = time.monotonic() + seconds
    for server_id in server_ids:
        while conn.compute.find_server(server_id, ignore_missing=True) is not None:
            assert time.monotonic() < deadline, f"server {server_id} is still there"
            time.sleep(1)


# --- what Acceleron and Placement hold ------------------------------------------------


def arqs(admin: Any, instance: str) -> list[dict[str, Any]]:
    response = admin.accelerator.get("/accelerator_requests", params={"instance": instance},
                                     headers=LATEST)  # fmt: skip
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["arqs"]
    return sorted(found, key=lambda a: (a["device_profile_group_id"], a["uuid"]))


def allocations(admin: Any, consumer: str) -> dict[str, dict[str, int]]:
    response = admin.placement.get(f"/allocations/{consumer}",
                                   headers={"OpenStack-API-Version": "placement 1.28"})  # fmt: skip
    return {rp: a["resources"] for rp, a in response.json()["allocations"].items()}


def provider(admin: Any, rp: str) -> dict[str, Any]:
    response = admin.placement.get(f"/resource_providers/{rp}",
                                   headers={"OpenStack-API-Version": "placement 1.14"})  # fmt: skip
    body: dict[str, Any] = response.json()
    return body


def handles_in_use(admin: Any) -> list[tuple[str, str]]:
    """(deployable name, handle address) of every attach handle in use in the cloud."""
    response = admin.accelerator.get("/deployables", headers=LATEST, params={"limit": 1000})
    return [(d["name"], h["address"]) for d in response.json()["deployables"]
            for h in d["attach_handles"] if h["in_use"]]  # fmt: skip


def region(admin: Any, host: str, key: str) -> dict[str, Any]:
    response = admin.accelerator.get("/deployables", headers=LATEST,
                                     params={"hostname": host, "key": key})  # fmt: skip
    (found,) = response.json()["deployables"]
    result: dict[str, Any] = found
    return result


def check_bound(admin: Any, server: Any, groups: int, per_group: int = 1) -> list[dict[str, Any]]:
    """The server's requests are Bound, one per accelerator asked for, on its host, and
    each one's provider holds an allocation of the server under that host's compute node;
    returns the requests."""
    host = server.compute_host
    found = arqs(admin, server.id)
    assert len(found) == groups * per_group, found
    assert {a["state"] for a in found} == {"Bound"}, found
    assert {a["hostname"] for a in found} == {host}
    held = allocations(admin, server.id)
    root = {rp["name"]: rp["uuid"] for rp in [provider(admin, p) for p in held]}
    compute_rp = root.get(host)
    assert compute_rp, f"no allocation on the compute node {host}: {held}"
    for arq in found:
        rp = provider(admin, arq["device_rp_uuid"])
        assert arq["device_rp_uuid"] in held, (arq, held)
        assert rp["root_provider_uuid"] == compute_rp, (rp, host)
        assert rp["name"].startswith(f"{host}_"), rp
        assert any(rc.startswith("CUSTOM_ACCELERATOR_") for rc in held[arq["device_rp_uuid"]])
    return found


def check_gone(admin: Any, *server_ids: str, seconds: float = 60) -> None:
    """Nothing of the servers is left: no request, no allocation, no handle in use (Nova
    finishes a delete after the server has gone from its API: wait a little)."""
    deadline = time.monotonic() + seconds
    while True:
        left = [(s, arqs(admin, s), allocations(admin, s)) for s in server_ids]
        left = [item for item in left if item[1] or item[2]]
        in_use = handles_in_use(admin)
        if not left and not in_use:
            return
        assert time.monotonic() < deadline, f"left behind: {left}, handles in use: {in_use}"
        time.sleep(1)


def glance_bitstream(
    tmp_path: Path,
    function: str,
    declared: str,
    built_for: str,
    *properties: str,
    size: int = 4096,
) -> str:
    """A GBS bitstream uploaded to Glance with the ``openstack`` CLI, as an operator
    would: ``declared`` is the region type its properties say, ``built_for`` the one its
    header says (they differ only to make a bind fail)."""
    path = tmp_path / f"{function[:8]}.gbs"
    path.write_bytes(gbs.build(built_for, (function,), payload=b"\x5a" * size))
    image = osc("image", "create", "--public", "--disk-format", "raw", "--container-format",
                "bare", "--file", str(path), "--property", f"accel:function_uuid={function}",
                "--property", f"accel:region_type_uuid={declared}",
                "--property", "accel:vendor=8086", *properties, "-f", "json", path.name,
                user="admin")  # fmt: skip
    image_id: str = image["id"]
    return image_id
