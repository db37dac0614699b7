"""What a region holds reaches another project only as that project could have loaded it.

A live API on each database, a host whose fake driver programs for real, the local
bitstream store, certificates made in the test. Project ``p`` runs only verified images
(``require_signatures_projects``, set on the API and the agent alike); ``q``, ``r``, ``s``
and ``t`` run anything they may see. A region left holding one project's private or
unsigned image is never handed to another as it is: it is programmed again with a
bitstream the asking project may use, or the bind is refused with a reason that names
neither the other project nor its bitstream. An image loaded outside Acceleron is used as
found only where its operator trusts every function it holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.db.session import Database
from acceleron.drivers import gbs
from tests.fixtures import signing
from tests.fixtures.host import Host, arq_of, call, profile
from tests.fixtures.server import serve

REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"  # the first of what region0 holds at start


def project(name: str) -> dict[str, str]:
    """A member of ``name`` calling with the compute service's token beside its own."""
    return {"X-Roles": "member,reader", "X-Project-Id": name, "X-Service-Roles": "service"}


P, Q, R, S, T = (project(n) for n in "pqrst")
ADMIN = {"X-Roles": "admin,member,reader", "X-Project-Id": "operators"}


@pytest.fixture
def url(conf: cfg.ConfigOpts, db: Database) -> Iterator[str]:
    """The API on this test's database: p runs only verified images; the functions the
    fake regions are found holding are not trusted (each test says what it trusts); a
    region given back is not cleaned (``accel:cleaning`` none would do the same), so
    that what one project loaded is still there for the next to ask for."""
    conf.set_override("require_signatures_projects", ["p"], "bitstreams")
    conf.set_override("methods", {"FPGA": "none"}, "cleaning")
    with serve(create_app(conf, db)) as found:
        yield found


@pytest.fixture
def host(url: str, tmp_path: Path, certs: Path, ca: signing.Signer) -> Host:
    found = Host(url, tmp_path / "host")
    options = {
        "require_signatures_projects": ["p"],
        "certificate_dir": str(certs),
        "trusted_certificate_ids": [ca.id],
    }
    for name, value in options.items():
        found.conf.set_override(name, value, group="bitstreams")
    found.report()
    return found


def upload(
    url: str,
    function: str,
    who: dict[str, str],
    signer: signing.Signer | None = None,
    public: bool = False,
) -> str:
    """A GBS image for region0's type implementing ``function``, in ``who``'s project
    (public when ``public``, signed by ``signer`` if given); its uuid."""
    data = gbs.build(REGION0_TYPE, (function,), payload=uuid.uuid4().bytes * 5_000)
    meta: dict[str, Any] = {
        "name": f"{function[:8]}.gbs",
        "function_uuid": function,
        "region_type_uuid": REGION0_TYPE,
        "visibility": "public" if public else "private",
        "properties": signer.sign(data) if signer else {},
    }
    created = call(url, "POST", "/v2/bitstreams", json=meta, headers=who)
    assert created.status_code == 201, created.text
    bitstream: str = created.json()["uuid"]
    put = call(
        url,
        "PUT",
        f"/v2/bitstreams/{bitstream}/data",
        data=data,
        headers={**who, "Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    return bitstream


def ask(
    host: Host, function: str, who: dict[str, str], by: str = "accel:function_id"
) -> tuple[str, requests.Response]:
    """A request of ``who`` for ``function`` (named by ``by``: the ``accel:`` key, or a
    trait), bound to region0 of the host's first card; the request and the bind's answer."""
    named = {by: function} if by.startswith("accel:") else {by: "required"}
    name = profile(host.url, [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", **named}])
    created = call(
        host.url,
        "POST",
        "/v2/accelerator_requests",
        json={"device_profile_name": name},
        headers=who,
    )
    assert created.status_code == 201, created.text
    arq: str = created.json()["arqs"][0]["uuid"]
    ops = [
        {"path": "/hostname", "op": "add", "value": host.name},
        {"path": "/device_rp_uuid", "op": "add", "value": host.region()["rp_uuid"]},
        {"path": "/instance_uuid", "op": "add", "value": str(uuid.uuid4())},
    ]
    return arq, call(host.url, "PATCH", "/v2/accelerator_requests", json={arq: ops}, headers=who)


def bound(host: Host, function: str, who: dict[str, str]) -> str:
    """``who`` gets region0 for ``function`` (programmed first where it must be), and
    gives it back; the request."""
    arq, answer = ask(host, function, who)
    assert answer.status_code == 202, answer.text
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "Bound")
    gone = call(host.url, "DELETE", f"/v2/accelerator_requests/{arq}", headers=who)
    assert gone.status_code == 204, gone.text
    host.report()  # what the card holds now, as the agent's next scan says
    return arq


def refused(host: Host, function: str, who: dict[str, str]) -> str:
    """The bind of ``who``'s request for ``function`` is refused; its reason."""
    arq, answer = ask(host, function, who)
    assert answer.status_code == 409, answer.text
    assert arq_of(host.url, arq)["state"] == "Initial"
    reason: str = answer.json()["errors"][0]["detail"]
    return reason


def provenance(host: Host) -> dict[str, Any]:
    found: dict[str, Any] = host.region()["provenance"]
    return found


def test_an_unsigned_private_image_is_never_handed_to_a_project_that_runs_signed_ones(
    host: Host, signer: signing.Signer
) -> None:
    function = uuid.uuid4().hex
    q_image = upload(host.url, function, Q)
    bound(host, function, Q)
    held = provenance(host)
    assert held["source"] == "acceleron" and held["bitstream_id"] == q_image
    assert held["project_id"] == "q" and held["functions"] == [function]
    assert held["signature"] == {"verified": False, "reason": "unsigned"}

    reason = refused(host, function, P)  # nothing p may load: refused, nothing programmed
    assert "may not use" in reason and q_image not in reason and "q" not in reason.split()
    assert host.programmed == 1 and provenance(host)["bitstream_id"] == q_image

    signed = upload(host.url, function, ADMIN, signer, public=True)
    bound(host, function, P)  # programmed again, with the one p may run
    assert host.programmed == 2
    held = provenance(host)
    assert held["bitstream_id"] == signed and held["project_id"] == "p"
    assert held["signature"] == {"verified": True, "certificate_id": signer.id}
    bound(host, function, Q)  # q may use what p loaded (public, verified): as it is
    assert host.programmed == 2 and provenance(host)["project_id"] == "p"


def test_three_projects_each_get_only_what_they_may_see(host: Host) -> None:
    function = uuid.uuid4().hex
    q_image, r_image = upload(host.url, function, Q), upload(host.url, function, R)
    bound(host, function, Q)
    bound(host, function, R)  # r may not use q's private image: its own is loaded
    assert host.programmed == 2 and provenance(host)["bitstream_id"] == r_image
    bound(host, function, Q)  # and back: q may not use r's
    assert host.programmed == 3 and provenance(host)["bitstream_id"] == q_image
    reason = refused(host, function, S)  # s sees neither, and has none of its own
    assert q_image not in reason and r_image not in reason and "may not use" in reason

    public = upload(host.url, function, ADMIN, public=True)
    bound(host, function, S)
    bound(host, function, T)  # t may use what s loaded (public): as it is
    assert host.programmed == 4 and provenance(host)["bitstream_id"] == public
    assert provenance(host)["project_id"] == "s"
    # Public but unsigned: not reused for p, which runs only verified images; loading it
    # again is tried, and the agent refuses it, leaving the region as it was.
    arq, answer = ask(host, function, P)
    assert answer.status_code == 202, answer.text
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "BindFailed")
    assert "signature refused (unsigned)" in arq_of(host.url, arq)["failure_reason"]
    assert host.programmed == 4 and provenance(host)["project_id"] == "s"


def test_an_image_loaded_outside_acceleron_counts_only_if_its_operator_trusts_it(
    host: Host,
) -> None:
    held = provenance(host)
    assert held["source"] == "outside" and held["trusted"] is False
    assert PRELOADED in held["functions"]
    reason = refused(host, PRELOADED, Q)
    assert "loaded outside Acceleron" in reason and "trusted_functions" in reason
    public = upload(host.url, PRELOADED, ADMIN, public=True)
    bound(host, PRELOADED, Q)  # programmed first with what q may load
    assert host.programmed == 1 and provenance(host)["bitstream_id"] == public


def test_asking_by_function_trait_alone_takes_no_shortcut(host: Host) -> None:
    """A group that requires the function's trait (and names no bitstream) lands on the
    regions holding it; it binds there only where the project could have loaded it."""
    function = uuid.uuid4().hex
    upload(host.url, function, Q)
    bound(host, function, Q)
    trait = f"trait:CUSTOM_FPGA_INTEL_FUNCTION_{function.upper()}"
    arq, answer = ask(host, function, R, by=trait)
    assert answer.status_code == 409, answer.text
    assert "may not use" in answer.json()["errors"][0]["detail"]
    assert arq_of(host.url, arq)["state"] == "Initial" and host.programmed == 1
