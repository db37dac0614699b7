"""Upstream Cyborg in the reference cloud (``python -m cloud up --cyborg``), and Acceleron
started beside it to adopt it (tests/e2e/test_cyborg.py).

Not ``cyborg.py``: the services' WSGI runner imports modules of this directory by name,
and would find it instead of Cyborg's own package."""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cloud.base import (
    COMPUTES,
    MYSQL,
    REPO,
    RUN,
    VENVS,
    Cloud,
    CloudError,
    answers,
    log,
    restart,
    run,
    wait_for,
)
from cloud.configs import connect
from cloud.services import acceleron, acceleron_schema, agents, compute_reports, wsgi


def acceleron_beside_cyborg(cloud: Cloud) -> None:
    """Acceleron started in a cloud that runs upstream Cyborg, as an operator does before
    `acceleron adopt cyborg` (docs/adopt-from-cyborg.md): its schema, the API replicas
    behind a balancer of their own port, and an agent per compute whose fake driver sees
    what Cyborg's does (cloud/templates/inventory-cyborg.yaml). The catalog's accelerator
    endpoint stays Cyborg's. Nothing when Acceleron runs already."""
    if not cloud.cyborg:
        raise CloudError("Acceleron already serves this cloud: start one with --cyborg")
    if "acceleron-api-1" in cloud.processes:
        log("Acceleron runs beside Cyborg already")
        return
    acceleron_schema(cloud)
    acceleron(cloud)
    agents(cloud)
    log(f"Acceleron beside Cyborg: {cloud.url('acceleron')}/v2")


def adopt_cyborg(cloud: Cloud, mapping: Path) -> subprocess.CompletedProcess[str]:
    """``acceleron adopt cyborg`` with the trait mapping file ``mapping``, as the operator
    runs it on the API's host (docs/adopt-from-cyborg.md); its exit status and output."""
    database = f"{MYSQL}/{cloud.database('cyborg')}?charset=utf8mb4"
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "acceleron"),
            "--config-file",
            str(RUN / "acceleron" / "acceleron.conf"),
            "adopt",
            "cyborg",
            "--database",
            database,
            "--mapping",
            str(mapping),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def cyborg_programmed(cloud: Cloud, function: str) -> str:
    """What upstream Cyborg records on a deployable's provider once it has programmed
    ``function`` into it: the trait ``CUSTOM_FPGA_FUNCTION_ID_<DRIVER>_<FUNCTION>``, here on
    every fake device's provider. Cyborg's fake driver cannot program (Cyborg finds no
    FPGA driver named ``fake``), so the trait is set as Cyborg's bind would set it;
    Acceleron's region of the same card holds the function (inventory-cyborg.yaml).
    Returns the trait."""
    trait = f"CUSTOM_FPGA_FUNCTION_ID_FAKE_{function.replace('-', '').upper()}"
    placement = connect(cloud).placement
    version = {"OpenStack-API-Version": "placement 1.14"}
    placement.put(f"/traits/{trait}", headers=version)
    for host in COMPUTES:
        (rp,) = placement.get(
            "/resource_providers", params={"name": f"{host}_FakeDevice"}, headers=version
        ).json()["resource_providers"]
        held = placement.get(f"/resource_providers/{rp['uuid']}/traits", headers=version).json()
        body = {
            "traits": sorted({*held["traits"], trait}),
            "resource_provider_generation": held["resource_provider_generation"],
        }
        done = placement.put(f"/resource_providers/{rp['uuid']}/traits", json=body, headers=version)
        if done.status_code != 200:
            raise CloudError(f"{trait} on {rp['name']}: {done.status_code} {done.text}")
    return trait


def switch_to_acceleron(cloud: Cloud) -> None:
    """After the adoption (docs/adopt-from-cyborg.md, step 5): the catalog's accelerator
    endpoints point at Acceleron's balancer, Cyborg's services stop, and each nova-compute
    restarts. Nova's compute caches its host's provider tree, Cyborg's providers included,
    and fails every claim (a boot, a heal of its resources) on a provider of the cache that
    the adoption deleted, until it reads the tree again: at its start."""
    admin = connect(cloud)
    (service,) = admin.identity.services(type="accelerator")
    for endpoint in admin.identity.endpoints(service_id=service.id):
        admin.identity.update_endpoint(endpoint, url=f"{cloud.url('acceleron')}/v2")
    for name in [n for n in cloud.processes if n.startswith("cyborg-")]:
        cloud.stop(name)
    for host in COMPUTES:
        restart(cloud, f"nova-{host}")  # the old process has gone: no report of its own
        since = dt.datetime.now(dt.UTC).replace(tzinfo=None)
        wait_for(
            f"nova-compute of {host} back",
            compute_reports(admin, host, since),
            cloud,
            [f"nova-{host}"],
        )
    log(f"the accelerator endpoint is Acceleron's now: {cloud.url('acceleron')}/v2")


def cyborg_schema(cloud: Cloud) -> None:
    """Upstream Cyborg's database schema, made by Cyborg itself."""
    config = str(RUN / "cyborg" / "cyborg.conf")
    run(
        [str(VENVS / "cyborg" / "bin" / "cyborg-dbsync"), "--config-file", config, "upgrade"],
        what="cyborg-dbsync upgrade",
    )


def cyborg(cloud: Cloud) -> None:
    """Upstream Cyborg's API (its WSGI application, on the accelerator port) and its
    conductor, in place of Acceleron's replicas."""
    config = str(RUN / "cyborg" / "cyborg.conf")
    wsgi(
        cloud,
        "cyborg-api",
        "cyborg.wsgi.api:application",
        {},
        "accelerator",
        "--config-file",
        config,
    )
    conductor = str(VENVS / "cyborg" / "bin" / "cyborg-conductor")
    cloud.start("cyborg-conductor", [conductor, "--config-file", config], {})
    wait_for("cyborg-api", answers(cloud.url("accelerator")), cloud, ["cyborg-api"])


def cyborg_agents(cloud: Cloud) -> None:
    """A cyborg-agent per compute (once the compute nodes are in Placement: an agent
    looks its host's provider up when it starts), one after the other: each waits until
    its host's fake device is in Cyborg and, with its inventory and trait, in Placement.
    Two first reports at once race in Cyborg's conductor (the second to create the trait
    CUSTOM_FAKE_DEVICE takes Placement's 204 for a failure and drops that host's device
    until the agent's next periodic report, a minute later)."""
    agent = str(VENVS / "cyborg" / "bin" / "cyborg-agent")
    conn = connect(cloud)
    for host in COMPUTES:
        configs = [RUN / "cyborg" / "cyborg.conf", RUN / "cyborg" / f"cyborg-agent-{host}.conf"]
        argv = [agent, *(a for c in configs for a in ("--config-file", str(c)))]
        cloud.start(f"cyborg-agent-{host}", argv, {})
        wait_for(
            f"{host}'s fake device in Cyborg and Placement",
            cyborg_device_published(conn, f"{host}_FakeDevice"),
            cloud,
            [f"cyborg-agent-{host}", "cyborg-conductor", "cyborg-api"],
        )


def cyborg_device_published(conn: Any, name: str) -> Callable[[], bool]:
    """Whether Cyborg lists the deployable ``name`` and its provider in Placement has
    its inventory and its trait (the conductor writes its database first, then the
    provider, its inventory, then its traits)."""
    version = {"OpenStack-API-Version": "placement 1.14"}

    def check() -> bool:
        listed = conn.accelerator.get("/deployables").json()["deployables"]
        if name not in {d["name"] for d in listed}:
            return False
        found = conn.placement.get(
            "/resource_providers", params={"name": name}, headers=version
        ).json()["resource_providers"]
        if not found:
            return False
        path = f"/resource_providers/{found[0]['uuid']}"
        inventory = conn.placement.get(f"{path}/inventories", headers=version).json()
        traits = conn.placement.get(f"{path}/traits", headers=version).json()
        return "FPGA" in inventory["inventories"] and "CUSTOM_FAKE_DEVICE" in traits["traits"]

    return check
