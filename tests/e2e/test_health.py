"""Device health through the whole cloud: a server holds a QAT VF, the card fails (a fault
written into the fake driver's state file, as the agent's driver would see it), the
agent reports it, Acceleron reserves the card's inventory in Placement, the bound request
shows the condition, and the next boot lands on the other host. The fault clears and the
inventory comes back by itself."""

from __future__ import annotations

import json
import os
from typing import Any

from cloud.base import RUN
from tests.fixtures.e2e import (
    LATEST,
    Flavors,
    active,
    arqs,
    boot,
    check_bound,
    check_gone,
    delete_and_wait,
)
from tests.fixtures.waiting import wait_for

QAT = "CUSTOM_ACCELERATOR_QAT"
REPORT = 100.0  # seconds: the agents report every 30 s, then the sync runs (every 5 s)


def test_a_failing_card_is_reserved_shown_and_avoided(
    admin: Any, member: Any, flavors: Flavors, image: str
) -> None:
    flavor = flavors.make([{f"resources:{QAT}": "1"}])
    first = active(admin, boot(flavor, image)["id"])
    (arq,) = check_bound(admin, first, groups=1)
    host, rp = first.compute_host, arq["device_rp_uuid"]
    card = _qat_card(admin, host)
    servers = [first.id]
    try:
        _inject(host, card["pci_address"], {"state": "unhealthy", "reason": "e2e: firmware hung"})
        wait_for(lambda: _device(admin, card["uuid"])["health"] == "unhealthy", REPORT, 2)
        assert _device(admin, card["uuid"])["health_reason"] == "e2e: firmware hung"
        wait_for(lambda: _reserved(admin, rp) == (2, 2), REPORT, 2)  # (reserved, total)
        (held,) = arqs(admin, first.id)
        assert held["state"] == "Bound"  # the request stays; its condition shows
        assert held["health"]["state"] == "unhealthy", held

        second = active(admin, boot(flavor, image)["id"])
        servers.append(second.id)
        assert second.compute_host != host  # the failed card took nothing new
    finally:
        _inject(host, card["pci_address"], None)
    wait_for(lambda: _device(admin, card["uuid"])["health"] == "healthy", REPORT, 2)
    wait_for(lambda: _reserved(admin, rp) == (0, 2), REPORT, 2)
    delete_and_wait(member, *servers)
    check_gone(admin, *servers)


def _qat_card(admin: Any, host: str) -> dict[str, Any]:
    response = admin.accelerator.get(
        "/devices", headers=LATEST, params={"hostname": host, "type": "QAT"}
    )
    assert response.status_code == 200, response.text
    (card,) = response.json()["devices"]
    found: dict[str, Any] = card
    return found


def _device(admin: Any, uuid: str) -> dict[str, Any]:
    response = admin.accelerator.get(f"/devices/{uuid}", headers=LATEST)
    assert response.status_code == 200, response.text
    found: dict[str, Any] = response.json()
    return found


def _reserved(admin: Any, rp: str) -> tuple[int, int]:
    """The QAT inventory of provider ``rp`` in Placement: (reserved, total)."""
    response = admin.placement.get(
        f"/resource_providers/{rp}/inventories/{QAT}",
        headers={"OpenStack-API-Version": "placement 1.14"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    return body["reserved"], body["total"]


def _inject(host: str, address: str, health: dict[str, Any] | None) -> None:
    """Write (or with None, clear) a device's health in the fake driver's state file of
    ``host``'s agent, keeping what else the file holds (programmed regions, mdevs)."""
    path = RUN / "acceleron" / host / "fake-driver-state.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"version": 1}
    entry = data.setdefault("devices", {}).setdefault(address, {})
    if health is None:
        entry.pop("health", None)
    else:
        entry["health"] = {**health, "deployables": {}}
    tmp = path.with_name(".e2e-state.json")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)
