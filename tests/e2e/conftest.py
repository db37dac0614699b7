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

import base64
import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openstack
import pytest
from cloud.base import RUN, Cloud
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from tests.fixtures import signing
from tests.fixtures.e2e import (
    Flavors,
    delete_and_wait,
    osc,
)


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
                item.add_marker(
                    pytest.mark.skip(reason="needs upstream Cyborg: `python -m cloud up --cyborg`")
                )
            elif not cyborg:
                item.add_marker(
                    pytest.mark.skip(
                        reason="runs against Acceleron; the cloud runs upstream Cyborg"
                    )
                )
        elif flat and found.nested:
            item.add_marker(
                pytest.mark.skip(reason="needs a flat cloud: `python -m cloud up --flat`")
            )
        elif not flat and not found.nested:
            item.add_marker(
                pytest.mark.skip(
                    reason="expects nested providers; the cloud is flat (`python -m cloud up`)"
                )
            )


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


@pytest.fixture(scope="session")
def image(cloud: Cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A small public image to boot from (the fake driver never reads it)."""
    path = tmp_path_factory.mktemp("image") / "tiny.img"
    path.write_bytes(b"\0" * 1024)
    created = osc(
        "image",
        "create",
        "--public",
        "--disk-format",
        "raw",
        "--container-format",
        "bare",
        "--file",
        str(path),
        "-f",
        "json",
        f"e2e-{uuid.uuid4().hex[:6]}",
        user="admin",
    )
    yield created["id"]
    osc("image", "delete", created["id"], user="admin")


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


@pytest.fixture(scope="session")
def signer(cloud: Cloud, admin: Any) -> Iterator[signing.Signer]:
    """A signing certificate issued by the cloud's CA, stored in Barbican (the admin's
    secret: Glance reads it with the uploader's token) and readable by the agents' user
    (Barbican's ACL). Its id is the secret's."""
    if not cloud.signing_ca:
        pytest.skip("the cloud has no signing CA (started before Barbican was in it)")
    key = serialization.load_pem_private_key(
        (RUN / "barbican" / "signing-ca.key").read_bytes(), None
    )
    assert isinstance(key, rsa.RSAPrivateKey)
    ca_pem = (RUN / "barbican" / "signing-ca.pem").read_bytes()
    ca = signing.Signer(cloud.signing_ca, key, x509.load_pem_x509_certificate(ca_pem))
    made = signing.leaf(ca)
    pem = made.pem()  # castellan reads a certificate secret as PEM
    secret = admin.key_manager.create_secret(
        name="e2e-bitstream-signer",
        secret_type="certificate",
        algorithm="RSA",
        payload=base64.b64encode(pem).decode(),
        payload_content_type="application/octet-stream",
        payload_content_encoding="base64",
    )
    secret_id = str(secret.secret_ref).rsplit("/", 1)[-1]
    agents = admin.identity.find_user("acceleron").id
    read = {"read": {"users": [agents], "project-access": True}}
    acl = admin.key_manager.put(f"/secrets/{secret_id}/acl", json=read)
    assert acl.status_code == 200, acl.text
    yield dataclasses.replace(made, id=secret_id)
    admin.key_manager.delete_secret(secret_id)
