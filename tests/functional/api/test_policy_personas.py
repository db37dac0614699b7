"""Every persona on every policy rule, through the HTTP API in Keystone mode, with and
without ``[oslo_policy] enforce_new_defaults``.

A persona is what Keystone puts in a token: the roles it gives (with those they
imply: admin -> manager -> member -> reader) and the scope. Each rule has a probe, a
request that needs that rule and nothing else a persona could lack; the persona is
refused when the answer is a 403 from policy. ``ALLOWED`` is Acceleron's answer;
``UPSTREAM`` is upstream Cyborg's under its new defaults (cyborg/policies/), and
``ADDED`` the deliberate differences that docs/api/compatibility.md lists.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from keystoneauth1 import fixture as ksa_fixture
from keystonemiddleware.fixture import AuthTokenFixture
from tests.fixtures.keystone import keystone_client

from acceleron.api import policy
from acceleron.db.models import Claim, table
from acceleron.db.session import Database

LATEST = {"OpenStack-API-Version": "accelerator latest"}
PROJECT = "p1"
ADMIN_ROLES = ("admin", "manager", "member", "reader")
# persona -> (roles, scope): a project's id, "system" or "domain:<id>".
PERSONAS: dict[str, tuple[tuple[str, ...], str]] = {
    "reader": (("reader",), PROJECT),
    "member": (("member", "reader"), PROJECT),
    "manager": (("manager", "member", "reader"), PROJECT),
    "admin": (ADMIN_ROLES, PROJECT),
    "service": (("service",), "service"),
    "other": (("anotherrole",), PROJECT),
    "system_admin": (ADMIN_ROLES, "system"),
    "domain_admin": (ADMIN_ROLES, "domain:default"),
}

READ_ALL = {"reader", "member", "manager", "admin", "service"}
INVENTORY = {"manager", "admin", "service"}
MEMBER_OR_SERVICE = {"member", "manager", "admin", "service"}
MEMBER_OR_ADMIN = {"member", "manager", "admin"}
ADMIN = {"admin"}
ADMIN_OR_SERVICE = {"admin", "service"}

ALLOWED: dict[str, set[str]] = {
    "device_profile:get_all": READ_ALL,
    "device_profile:get_one": READ_ALL,
    "device_profile:create": ADMIN,
    "device_profile:update": ADMIN,
    "device_profile:delete": ADMIN,
    "host:get": ADMIN_OR_SERVICE,
    "host:report": ADMIN_OR_SERVICE,
    "device:get_all": INVENTORY,
    "device:get_one": INVENTORY,
    "device:enable": ADMIN,
    "device:disable": ADMIN,
    "device:maintenance": ADMIN,
    "device:history": ADMIN,
    "deployable:maintenance": ADMIN,
    "deployable:get_all": INVENTORY,
    "deployable:get_one": INVENTORY,
    "deployable:program": ADMIN,
    "attribute:get_all": INVENTORY,
    "attribute:get_one": INVENTORY,
    "attribute:create": ADMIN,
    "attribute:delete": ADMIN,
    "placement:sync": ADMIN,
    "placement:embedded": ADMIN_OR_SERVICE,
    "arq:get_all": READ_ALL,
    "arq:get_one": READ_ALL,
    "arq:create": MEMBER_OR_SERVICE,
    "arq:update": MEMBER_OR_SERVICE,
    "arq:program": MEMBER_OR_SERVICE,
    "arq:delete": MEMBER_OR_SERVICE,
    "arq:get_all_projects": ADMIN_OR_SERVICE,
    # The persona's token sent as the service token beside a member's: Keystone takes
    # only a service's as one (keystonemiddleware's [keystone_authtoken]
    # service_token_roles), and then the rule lets it bind.
    "arq:bind": {"service"},
    "claim:create": MEMBER_OR_SERVICE,
    "claim:get": READ_ALL,
    "claim:delete": MEMBER_OR_SERVICE,
    "claim:all_projects": ADMIN_OR_SERVICE,
    "claim:hostname": ADMIN_OR_SERVICE,
    "task:claim": ADMIN_OR_SERVICE,
    "task:update": ADMIN_OR_SERVICE,
    "task:get": ADMIN_OR_SERVICE,
    "bitstream:get": READ_ALL,
    "bitstream:get_all_projects": ADMIN_OR_SERVICE,
    "bitstream:create": MEMBER_OR_ADMIN,
    "bitstream:publicize": ADMIN,
    "bitstream:upload": MEMBER_OR_ADMIN,
    "bitstream:delete": MEMBER_OR_ADMIN,
    "quota:get": READ_ALL,
}

# Upstream's new defaults for the rules it has, personas as above (a system-scoped
# token is refused everywhere: every rule has scope_types ["project"]).
UPSTREAM_READ = {"reader", "member", "manager", "admin"}
UPSTREAM: dict[str, set[str]] = {
    "device_profile:get_all": UPSTREAM_READ,
    "device_profile:get_one": UPSTREAM_READ,
    "device_profile:create": ADMIN,
    "device_profile:delete": ADMIN,
    "arq:get_all": UPSTREAM_READ,
    "arq:get_one": UPSTREAM_READ,
    "arq:create": MEMBER_OR_SERVICE,
    "arq:update": MEMBER_OR_SERVICE,
    "arq:delete": MEMBER_OR_SERVICE,
    **{f"{noun}:{verb}": {"manager", "admin"}
       for noun in ("device", "deployable", "attribute") for verb in ("get_all", "get_one")},
    "device:enable": ADMIN,
    "device:disable": ADMIN,
    "deployable:program": ADMIN,
    "attribute:create": ADMIN,
    "attribute:delete": ADMIN,
}  # fmt: skip
# Where Acceleron lets more in, and why: the agents, os_acc and Nova's weigher read with
# their own service credentials.
ADDED: dict[str, set[str]] = {
    rule: {"service"}
    for rule in (
        "device_profile:get_all",
        "device_profile:get_one",
        "arq:get_all",
        "arq:get_one",
        "device:get_all",
        "device:get_one",
        "deployable:get_all",
        "deployable:get_one",
        "attribute:get_all",
        "attribute:get_one",
    )
}


def some_uuid() -> str:
    return str(uuid.uuid4())


class Cloud:
    """The API in Keystone mode and a token per persona."""

    def __init__(self, client: TestClient, tokens: AuthTokenFixture, db: Database) -> None:
        self.client = client
        self.tokens = tokens
        self.headers = {name: self._token(name) for name in PERSONAS}
        self.admin = self.headers["admin"]
        self.member = self._project_token(PROJECT, "member", "reader")
        # A private bitstream, a request and a claim of another project, which only
        # some may see.
        other = {**LATEST, "X-Auth-Token": self._project_token("p2", "admin", "member")}
        self.private = self.create_bitstream(other)
        self.others_arq = self.create_arq(other)
        self.others_claim = some_uuid()
        with db.writer() as conn:  # Placement is off: the claim's row alone
            conn.execute(
                table(Claim)
                .insert()
                .values(
                    consumer=self.others_claim,
                    project_id="p2",
                    device_profile_name="dp",
                    state="bound",
                )
            )

    def _token(self, persona: str) -> str:
        roles, scope = PERSONAS[persona]
        token = ksa_fixture.V3Token(user_id=f"u-{persona}", user_domain_id="default")
        if scope == "system":
            token.set_system_scope()
        elif scope.startswith("domain:"):
            token.set_domain_scope(id=scope.removeprefix("domain:"))
        else:
            return self._project_token(scope, *roles)
        for role in roles:
            token.add_role(name=role)
        return str(self.tokens.add_token(token))

    def _project_token(self, project: str, *roles: str) -> str:
        token_id = uuid.uuid4().hex
        self.tokens.add_token_data(
            token_id, project_id=project, user_id=f"u-{project}", role_list=list(roles)
        )
        return token_id

    def create_bitstream(self, headers: dict[str, str], **extra: str) -> str:
        response = self.client.post("/v2/bitstreams", json={"name": "b", **extra}, headers=headers)
        assert response.status_code == 201, response.text
        ident: str = response.json()["uuid"]
        return ident

    def create_arq(self, headers: dict[str, str]) -> str:
        profile = [{"name": f"dp-{uuid.uuid4().hex[:8]}", "groups": [{"resources:FPGA": "1"}]}]
        made = self.client.post(
            "/v2/device_profiles", json=profile, headers={**LATEST, "X-Auth-Token": self.admin}
        )
        assert made.status_code == 201, made.text
        response = self.client.post(
            "/v2/accelerator_requests",
            headers=headers,
            json={"device_profile_name": made.json()["name"]},
        )
        assert response.status_code == 201, response.text
        ident: str = response.json()["arqs"][0]["uuid"]
        return ident

    def public_bitstream(self) -> str:
        """One of project p1's, public, so that every persona finds it."""
        return self.create_bitstream({**LATEST, "X-Auth-Token": self.admin}, visibility="public")


Probe = Callable[[Cloud, dict[str, str]], httpx.Response | bool]
HOST = "host-1"
REPORT = {"hostname": HOST, "agent_version": "1", "devices": []}
UNBIND = [{"path": "/hostname", "op": "remove"}]
PROGRAM = [{"path": "/program", "op": "replace", "value": [{"image_uuid": some_uuid()}]}]


def _sees_other_projects(cloud: Cloud, headers: dict[str, str]) -> bool:
    response = cloud.client.get("/v2/bitstreams", headers=headers)
    if response.status_code == 403:
        return False
    return cloud.private in [b["uuid"] for b in response.json()["bitstreams"]]


def _sees(response: httpx.Response) -> bool:
    """Whether the caller sees an object of another project (a 404 if not)."""
    assert response.status_code in (200, 403, 404), response.text
    return response.status_code == 200


def _binds(cloud: Cloud, headers: dict[str, str]) -> bool:
    """A bind by a member of the project, with the persona's token as the service
    token beside the member's: refused with 401 where Keystone does not take it as a
    service token, with 403 where the policy refuses it."""
    bind = [
        {"path": f"/{field}", "op": "add", "value": some_uuid()}
        for field in ("hostname", "device_rp_uuid", "instance_uuid")
    ]
    service = {**LATEST, "X-Auth-Token": cloud.member, "X-Service-Token": headers["X-Auth-Token"]}
    response = cloud.client.patch(
        "/v2/accelerator_requests", json={some_uuid(): bind}, headers=service
    )
    if response.status_code == 403:
        assert "acceleron:arq:bind" in response.text, response.text
    assert response.status_code in (401, 403, 404), response.text
    return bool(response.status_code == 404)  # no such request: bound had it existed


def _upload(cloud: Cloud, headers: dict[str, str]) -> httpx.Response:
    ident = cloud.public_bitstream()
    response: httpx.Response = cloud.client.put(
        f"/v2/bitstreams/{ident}/data",
        content=b"bits",
        headers={**headers, "Content-Type": "application/octet-stream"},
    )
    return response


PROBES: dict[str, Probe] = {
    "device_profile:get_all": lambda c, h: c.client.get("/v2/device_profiles", headers=h),
    "device_profile:get_one": lambda c, h: c.client.get(
        f"/v2/device_profiles/{some_uuid()}", headers=h),
    "device_profile:create": lambda c, h: c.client.post(
        "/v2/device_profiles", headers=h,
        json=[{"name": f"dp-{uuid.uuid4().hex[:8]}", "groups": [{"resources:FPGA": "1"}]}]),
    "device_profile:update": lambda c, h: c.client.patch(
        f"/v2/device_profiles/{some_uuid()}", headers=h,
        json=[{"op": "replace", "path": "/description", "value": "x"}]),
    "device_profile:delete": lambda c, h: c.client.delete(
        f"/v2/device_profiles/{some_uuid()}", headers=h),
    "host:get": lambda c, h: c.client.get(f"/v2/hosts/{HOST}", headers=h),
    "host:report": lambda c, h: c.client.put(f"/v2/hosts/{HOST}/report", json=REPORT,
                                             headers=h),
    "device:get_all": lambda c, h: c.client.get("/v2/devices", headers=h),
    "device:get_one": lambda c, h: c.client.get(f"/v2/devices/{some_uuid()}", headers=h),
    "device:enable": lambda c, h: c.client.post(f"/v2/devices/{some_uuid()}/enable", headers=h),
    "device:disable": lambda c, h: c.client.post(f"/v2/devices/{some_uuid()}/disable",
                                                 headers=h),
    "device:maintenance": lambda c, h: c.client.post(
        f"/v2/devices/{some_uuid()}/maintenance", json={"maintenance": False}, headers=h),
    "device:history": lambda c, h: c.client.get(f"/v2/devices/{some_uuid()}/history",
                                                headers=h),
    "deployable:maintenance": lambda c, h: c.client.post(
        f"/v2/deployables/{some_uuid()}/maintenance", json={"maintenance": False}, headers=h),
    "deployable:get_all": lambda c, h: c.client.get("/v2/deployables", headers=h),
    "deployable:get_one": lambda c, h: c.client.get(f"/v2/deployables/{some_uuid()}",
                                                    headers=h),
    "deployable:program": lambda c, h: c.client.patch(
        f"/v2/deployables/{some_uuid()}/program", json=PROGRAM, headers=h),
    "attribute:get_all": lambda c, h: c.client.get("/v2/attributes", headers=h),
    "attribute:get_one": lambda c, h: c.client.get(f"/v2/attributes/{some_uuid()}", headers=h),
    "attribute:create": lambda c, h: c.client.post(
        "/v2/attributes", json={"deployable_id": some_uuid(), "key": "k", "value": "v"},
        headers=h),
    "attribute:delete": lambda c, h: c.client.delete(f"/v2/attributes/{some_uuid()}",
                                                     headers=h),
    "placement:sync": lambda c, h: c.client.post("/v2/placement/sync", json={}, headers=h),
    "placement:embedded": lambda c, h: c.client.get("/placement/resource_providers",
                                                    headers=h),
    "arq:get_all": lambda c, h: c.client.get("/v2/accelerator_requests", headers=h),
    "arq:get_one": lambda c, h: c.client.get(f"/v2/accelerator_requests/{some_uuid()}",
                                             headers=h),
    "arq:create": lambda c, h: c.client.post(
        "/v2/accelerator_requests", json={"device_profile_name": "nope"}, headers=h),
    "arq:update": lambda c, h: c.client.patch(
        "/v2/accelerator_requests", json={some_uuid(): UNBIND}, headers=h),
    "arq:program": lambda c, h: c.client.post(
        f"/v2/accelerator_requests/{some_uuid()}/program", json={"bitstream_id": some_uuid()},
        headers=h),
    "arq:delete": lambda c, h: c.client.delete(f"/v2/accelerator_requests/{some_uuid()}",
                                               headers=h),
    "arq:get_all_projects": lambda c, h: _sees(
        c.client.get(f"/v2/accelerator_requests/{c.others_arq}", headers=h)),
    "arq:bind": _binds,
    "claim:all_projects": lambda c, h: _sees(
        c.client.get(f"/v2/claims/{c.others_claim}", headers=h)),
    "claim:hostname": lambda c, h: c.client.post(
        "/v2/claims", headers=h,
        json={"device_profile_name": "nope", "consumer_uuid": some_uuid(), "hostname": HOST}),
    "claim:create": lambda c, h: c.client.post(
        "/v2/claims", json={"device_profile_name": "nope", "consumer_uuid": some_uuid()},
        headers=h),
    "claim:get": lambda c, h: c.client.get(f"/v2/claims/{some_uuid()}", headers=h),
    "claim:delete": lambda c, h: c.client.delete(f"/v2/claims/{some_uuid()}", headers=h),
    "task:claim": lambda c, h: c.client.post(f"/v2/hosts/{HOST}/tasks/claim", headers=h),
    "task:update": lambda c, h: c.client.put(f"/v2/tasks/{some_uuid()}",
                                             json={"state": "running"}, headers=h),
    "task:get": lambda c, h: c.client.get(f"/v2/tasks/{some_uuid()}", headers=h),
    "bitstream:get": lambda c, h: c.client.get("/v2/bitstreams", headers=h),
    "bitstream:get_all_projects": _sees_other_projects,
    "bitstream:create": lambda c, h: c.client.post("/v2/bitstreams", json={"name": "b"},
                                                   headers=h),
    "bitstream:publicize": lambda c, h: c.client.post(
        "/v2/bitstreams", json={"name": "b", "visibility": "public"}, headers=h),
    "bitstream:upload": _upload,
    "bitstream:delete": lambda c, h: c.client.delete(f"/v2/bitstreams/{c.public_bitstream()}",
                                                     headers=h),
    "quota:get": lambda c, h: c.client.get(f"/v2/quotas/{PROJECT}", headers=h),
}  # fmt: skip


@pytest.fixture(params=[True, False], ids=["new_defaults", "legacy"])
def cloud(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_db: Database, placement: object
) -> Iterator[Cloud]:
    """The API under Keystone with the embedded Placement (its rule has a probe too)."""
    tokens = AuthTokenFixture()
    tokens.setUp()
    extra = (
        f"[oslo_policy]\nenforce_new_defaults = {request.param}\n"
        "[placement]\nmode = embedded\nembedded_connection = sqlite://\n"
    )
    try:
        with keystone_client(tmp_path, sqlite_db, extra=extra) as client:
            yield Cloud(client, tokens, sqlite_db)
    finally:
        tokens.cleanUp()


def allowed(cloud: Cloud, rule: str, persona: str) -> bool:
    answer = PROBES[rule](cloud, {**LATEST, "X-Auth-Token": cloud.headers[persona]})
    if isinstance(answer, bool):
        return answer
    if answer.status_code != 403:
        assert answer.status_code < 500, (rule, persona, answer.text)
        return True
    detail = answer.json()["errors"][0]["detail"]
    assert detail.startswith("Policy does not allow acceleron:"), (rule, persona, detail)
    return False


def test_every_rule_has_a_probe_and_an_answer() -> None:
    rules = {r.name.removeprefix("acceleron:") for r in policy.list_rules() if ":" in r.name}
    assert rules == set(PROBES) == set(ALLOWED)


def test_every_persona_on_every_rule(cloud: Cloud) -> None:
    found = {
        rule: {persona for persona in PERSONAS if allowed(cloud, rule, persona)} for rule in PROBES
    }
    wrong = {rule: (found[rule], ALLOWED[rule]) for rule in PROBES if found[rule] != ALLOWED[rule]}
    assert wrong == {}


def test_upstreams_personas_with_the_listed_differences() -> None:
    for rule, personas in UPSTREAM.items():
        assert ALLOWED[rule] == personas | ADDED.get(rule, set()), rule
