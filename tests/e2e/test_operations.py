"""Spec 000's instance operations against Nova 34, on a server with an accelerator.

Where Nova allows the operation, the accelerators are checked after it; where it
refuses, the refusal is checked and that nothing changed. What Nova 34 does, found
here: stop/start, reboot, pause, lock, rescue, rebuild, shelve/unshelve, snapshots,
backups, set admin password and crash dumps keep the same accelerator requests;
shelve-offload deletes them and unshelve makes new ones; evacuate (the host forced
down) makes new ones on the other host; resize, cold migration, live migration and
suspend are refused (400, "Feature not supported with instances that have
accelerators.") and change nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from cloud.base import Cloud, restart
from tests.fixtures.e2e import (
    Flavors,
    active,
    allocations,
    arqs,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
    osc,
    wait_migration,
    wait_status,
)

QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}
REFUSED = "Feature not supported with instances that have accelerators"


@pytest.fixture(scope="module")
def flavor(flavors: Flavors) -> str:
    return flavors.make([QAT])


@pytest.fixture
def server(admin: Any, member: Any, flavor: str, image: str) -> Iterator[Any]:
    booted = active(admin, boot(flavor, image)["id"])
    check_bound(admin, booted, groups=1)
    yield booted
    delete_and_wait(member, booted.id)
    check_gone(admin, booted.id)


def state(
    admin: Any, server_id: str
) -> tuple[str, str, list[tuple[str, str, str]], dict[str, Any]]:
    """What an operation may change: status, host, requests, allocations."""
    server = admin.compute.get_server(server_id)
    found = [(a["uuid"], a["state"], a["hostname"]) for a in arqs(admin, server_id)]
    return server.status, server.compute_host, found, allocations(admin, server_id)


def act(server_id: str, *action: str, user: str = "member") -> None:
    """``openstack server <action> <server>``."""
    osc("server", *action, server_id, user=user)


def settle(admin: Any, server_id: str, status: str) -> Any:
    found = wait_status(admin, server_id, status)
    assert found.status == status, f"{server_id}: {found.status}: {found.fault}"
    return found


def test_operations_that_keep_the_accelerators(admin: Any, server: Any) -> None:
    """stop/start, reboot (soft and hard), pause, lock, rescue and rebuild: the server
    keeps the same bound requests and allocations."""
    before = state(admin, server.id)
    for action, status in (
        (("stop",), "SHUTOFF"),
        (("start",), "ACTIVE"),
        (("reboot", "--soft"), "ACTIVE"),
        (("reboot", "--hard"), "ACTIVE"),
        (("pause",), "PAUSED"),
        (("unpause",), "ACTIVE"),
        (("lock",), "ACTIVE"),
        (("unlock",), "ACTIVE"),
        (("rescue",), "RESCUE"),
        (("unrescue",), "ACTIVE"),
        (("rebuild", "--wait"), "ACTIVE"),
    ):
        act(server.id, *action)
        settle(admin, server.id, status)
        assert state(admin, server.id)[1:] == before[1:], action
    check_bound(admin, admin.compute.get_server(server.id), groups=1)


def test_snapshot_backup_password_and_crash_dump_keep_the_accelerators(
    admin: Any, server: Any
) -> None:
    """Nova lets a server with accelerators through create_image, backup, set admin
    password and trigger crash dump, and leaves its requests and allocations as they
    are (what Acceleron checks or records for the last two is os_acc's part)."""
    before = state(admin, server.id)
    tag = server.id[:8]
    try:
        # The fake driver never uploads the image's data: the images stay queued.
        admin.compute.create_server_image(server.id, f"snap-{tag}")
        quiet(admin, server.id)
        admin.compute.backup_server(server.id, f"backup-{tag}", "daily", 1)
        quiet(admin, server.id)
        admin.compute.change_server_password(server.id, "s3cret-Pa55")
        quiet(admin, server.id)
        admin.compute.trigger_server_crash_dump(server.id)
        quiet(admin, server.id)
        assert state(admin, server.id)[1:] == before[1:]
        done = {a.action: a.message for a in admin.compute.server_actions(server.id)}
        for action in ("createImage", "createBackup", "changePassword", "trigger_crash_dump"):
            assert action in done and done[action] is None, done  # no error recorded
    finally:
        for found in admin.image.images():
            if found.name in (f"snap-{tag}", f"backup-{tag}"):
                admin.image.delete_image(found.id, ignore_missing=True)


def quiet(admin: Any, server_id: str, seconds: float = 120) -> None:
    """Wait until the server is ACTIVE with no task under way."""
    deadline = time.monotonic() + seconds
    while True:
        found = admin.compute.get_server(server_id)
        if found.status == "ACTIVE" and found.task_state is None:
            return
        assert time.monotonic() < deadline, f"{server_id}: {found.status}, {found.task_state}"
        time.sleep(1)


def test_a_locked_server_refuses_its_member(admin: Any, server: Any) -> None:
    before = state(admin, server.id)
    osc("server", "lock", server.id, user="admin")
    try:
        refused = osc("server", "stop", server.id, user="member", check=False)
        assert "is locked" in str(refused), refused
        assert state(admin, server.id) == before
    finally:
        osc("server", "unlock", server.id, user="admin")


@pytest.mark.parametrize(
    ("action", "user"),
    [
        (("suspend",), "member"),
        (("resize", "--flavor", "{other}"), "member"),
        (("migrate",), "admin"),
        (("migrate", "--live-migration"), "admin"),
    ],
    ids=["suspend", "resize", "cold-migrate", "live-migrate"],
)
def test_operations_nova_refuses(
    admin: Any, server: Any, flavors: Flavors, action: tuple[str, ...], user: str
) -> None:
    before = state(admin, server.id)
    argv = [a.replace("{other}", flavors.make([QAT])) for a in action]
    refused = osc("server", *argv, server.id, user=user, check=False)
    assert REFUSED in str(refused), refused
    assert state(admin, server.id) == before


def test_shelve_and_unshelve(admin: Any, server: Any) -> None:
    """Shelved (not offloaded), the server keeps its host and its requests."""
    before = state(admin, server.id)
    act(server.id, "shelve")
    settle(admin, server.id, "SHELVED")
    assert state(admin, server.id)[1:] == before[1:]
    act(server.id, "unshelve")
    settle(admin, server.id, "ACTIVE")
    assert state(admin, server.id)[1:] == before[1:]


def test_shelve_offload_and_unshelve(admin: Any, server: Any) -> None:
    """Offloading deletes the requests and frees the accelerator; unshelving makes new
    ones and binds them wherever the server lands."""
    old = {a["uuid"] for a in arqs(admin, server.id)}
    act(server.id, "shelve", "--offload", user="admin")
    settle(admin, server.id, "SHELVED_OFFLOADED")
    assert arqs(admin, server.id) == []
    assert allocations(admin, server.id) == {}
    act(server.id, "unshelve")
    unshelved = settle(admin, server.id, "ACTIVE")
    new = check_bound(admin, unshelved, groups=1)
    assert not old & {a["uuid"] for a in new}


def test_evacuate_with_the_host_forced_down(admin: Any, server: Any) -> None:
    """The server's host is forced down; evacuate rebuilds the server on the other host
    with new requests bound there (the old ones are deleted). Nova lets the old host up
    again only once its compute has restarted, which removes its allocation."""
    source = server.compute_host
    target = next(h for h in ("compute-1", "compute-2") if h != source)
    old = {a["uuid"] for a in arqs(admin, server.id)}
    service = (
        "compute",
        "service",
        "set",
        source,
        "nova-compute",
        "--os-compute-api-version",
        "2.11",
    )
    osc(*service, "--down", user="admin")
    try:
        osc("server", "evacuate", server.id, "--os-compute-api-version", "2.95", user="admin")
        # Nova stops the server where it lands (from 2.95) before it moves the server's
        # host there; the evacuation's migration is done only once the host has moved.
        assert wait_migration(admin, server.id, "evacuation") in ("done", "completed")
        evacuated = settle(admin, server.id, "SHUTOFF")
        assert evacuated.compute_host == target
        found = check_bound(admin, evacuated, groups=1)
        assert {a["hostname"] for a in found} == {target}
        assert not old & {a["uuid"] for a in found}
    finally:
        cloud = Cloud.load()
        assert cloud is not None
        restart(cloud, f"nova-{source}")
        # The restarted compute marks the evacuation done once it is up: slow on a busy
        # machine, and nothing else may run on the host before.
        deadline = time.monotonic() + 600
        while "failed" in str(osc(*service, "--up", user="admin", check=False)).lower():
            assert time.monotonic() < deadline, f"{source} could not be forced up again"
            time.sleep(3)
    source_rp = next(rp.id for rp in admin.placement.resource_providers(name=source))
    while source_rp in allocations(admin, server.id):
        assert time.monotonic() < deadline, "the old host kept its allocation"
        time.sleep(2)
    act(server.id, "start")
    check_bound(admin, settle(admin, server.id, "ACTIVE"), groups=1)
