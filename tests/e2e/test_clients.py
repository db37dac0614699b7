"""The client calls that need Nova: ``openstack accelerator arq bind`` looks the server
up in Nova before it asks Acceleron (tests/functional/test_real_clients.py covers the
rest without Nova)."""

from __future__ import annotations

from typing import Any

from tests.fixtures.e2e import Flavors, active, boot, check_gone, delete_and_wait, osc

QAT = {"resources:CUSTOM_ACCELERATOR_QAT": "1"}


def test_osc_arq_bind(admin: Any, member: Any, flavors: Flavors, image: str) -> None:
    """A user's ``arq bind`` finds the server in Nova and sends the per-request PATCH;
    Acceleron refuses it (403, naming the service token) because only the compute
    service binds in Keystone mode, as upstream, and nothing changes. The admin is
    refused too: the rule is about the compute service's token, not roles."""
    profile = flavors.make([QAT])
    server = active(admin, boot(flavors.plain(), image)["id"])
    arq: str = osc("accelerator", "arq", "create", profile, "-f", "json")["uuid"]
    rp = admin.placement.get("/resource_providers", params={"name": server.compute_host})
    compute_rp = rp.json()["resource_providers"][0]["uuid"]
    for user in ("member", "admin"):
        refused = osc(
            "accelerator",
            "arq",
            "bind",
            arq,
            server.compute_host,
            server.id,
            compute_rp,
            user=user,
            check=False,
        )
        assert "service token" in refused, refused
        assert "403" in refused or "Forbidden" in refused, refused
        shown = osc("accelerator", "arq", "show", arq, "-f", "json")
        assert (shown["state"], shown["instance_uuid"]) == ("Initial", None), shown
    osc("accelerator", "arq", "delete", arq)
    assert "not found" in osc("accelerator", "arq", "show", arq, check=False)
    delete_and_wait(member, server.id)
    check_gone(admin, server.id)
