"""Signed bitstreams end to end, on both stores: a live API (the local store, or a real
Glance behind it), a host whose agent requires signatures, certificates made in the test.

A bitstream signed by a certificate the host trusts is programmed at bind; every reason to
refuse one (bad signature, unsigned, unknown, untrusted or expired certificate,
unsupported algorithm) fails the bind with that reason, leaves the region as it was and
programs nothing. A project listed in require_signatures_projects gets the same refusal
with verify_signatures off, while another project's unsigned bitstream is programmed. A
claim that programs a tampered bitstream fails with the reason in the claim.
"""

from __future__ import annotations

import io
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import requests
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.cli.main import main
from acceleron.drivers import gbs
from tests.fixtures import signing
from tests.fixtures.allinone import all_in_one
from tests.fixtures.host import LATEST, Host, arq_of, bind, call, profile
from tests.fixtures.server import serve_on_sqlite
from tests.fixtures.waiting import wait_for

if TYPE_CHECKING:
    from tests.fixtures.glance import GlanceServer

pytest_plugins = ["tests.fixtures.glance"]
pytestmark = pytest.mark.slow

REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's first region type
PRELOADED = "d8424dc4a4a3c413f89e433683f9040b"  # what region0 holds at start
# The signing certificate's extensions, as docs/bitstreams.md writes them to signer.ext.
SIGNER_EXT = "keyUsage=critical,digitalSignature\nextendedKeyUsage=codeSigning\n"
P1 = {"X-Roles": "member,reader", "X-Project-Id": "p1", "X-Service-Roles": "service"}
P2 = {"X-Roles": "member,reader", "X-Project-Id": "p2", "X-Service-Roles": "service"}

# Uploads a bitstream with these bytes and properties, public; its id.
Uploader = Callable[[bytes, dict[str, str]], str]


@pytest.fixture(scope="module")
def glance_api(
    tmp_path_factory: pytest.TempPathFactory, glance_server: GlanceServer
) -> Iterator[str]:
    """A live API whose bitstreams are Glance images."""

    def on_glance(conf: cfg.ConfigOpts) -> None:
        confmod.register_keystoneauth(conf, "glance")
        conf.set_override("backend", "glance", group="bitstreams")
        conf.set_override("auth_type", "none", group="glance")
        conf.set_override("endpoint_override", glance_server.endpoint, group="glance")

    with serve_on_sqlite(tmp_path_factory.mktemp("glance-api"), on_glance) as url:
        yield url


@pytest.fixture(scope="module")
def glance_sdk(glance_server: GlanceServer) -> Iterator[Any]:
    conn = glance_server.connect()
    yield conn
    conn.close()


def local_uploader(url: str) -> Uploader:
    """Through Acceleron's API, the four properties given at create, as the CLI does."""

    def upload(data: bytes, properties: dict[str, str]) -> str:
        meta = {"name": "signed.gbs", "properties": properties, "visibility": "public"}
        created = call(url, "POST", "/v2/bitstreams", json=meta)
        assert created.status_code == 201, created.text
        bitstream: str = created.json()["uuid"]
        put = call(
            url,
            "PUT",
            f"/v2/bitstreams/{bitstream}/data",
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )
        assert put.status_code == 200, put.text
        return bitstream

    return upload


def glance_uploader(sdk: Any) -> Uploader:
    """With openstacksdk, as an operator does. The test's Glance has no Barbican to check
    signatures at upload, so the properties are set once the bytes are in."""

    def upload(data: bytes, properties: dict[str, str]) -> str:
        image = sdk.image.create_image(
            "signed.gbs",
            data=io.BytesIO(data),
            disk_format="raw",
            container_format="bare",
            allow_duplicates=True,
            visibility="public",
        )
        if properties:
            sdk.image.update_image(image, **properties)
        return str(image.id)

    return upload


@pytest.fixture(params=["local", "glance"])
def store(request: pytest.FixtureRequest) -> tuple[str, Uploader]:
    """The API's URL and how a bitstream gets into its store."""
    if request.param == "local":
        url = request.getfixturevalue("live_api")
        return url, local_uploader(url)
    url = request.getfixturevalue("glance_api")
    return url, glance_uploader(request.getfixturevalue("glance_sdk"))


def requiring_host(url: str, tmp_path: Path, certs: Path, ca: signing.Signer, **more: Any) -> Host:
    """A host that verifies signatures, trusting ``ca``, certificates in ``certs``."""
    host = Host(url, tmp_path)
    options = {
        "verify_signatures": True,
        "certificate_dir": str(certs),
        "trusted_certificate_ids": [ca.id],
        **more,
    }
    for name, value in options.items():
        host.conf.set_override(name, value, group="bitstreams")
    host.report()
    return host


def fpga_group(bitstream: str) -> list[dict[str, str]]:
    return [
        {
            "resources:CUSTOM_ACCELERATOR_FPGA": "1",
            "trait:CUSTOM_PROGRAMMABLE": "required",
            "accel:bitstream_id": bitstream,
        }
    ]


def new_gbs() -> tuple[bytes, str]:
    function = uuid.uuid4().hex
    return gbs.build(REGION0_TYPE, (function,), payload=uuid.uuid4().bytes * 20_000), function


def refused_bind(host: Host, bitstream: str, headers: dict[str, str] | None = None) -> str:
    """Bind a request for the bitstream; its failure reason, once the region was checked
    to be as it was."""
    arq = bind(host, profile(host.url, fpga_group(bitstream)), host.region()["rp_uuid"], headers)
    host.run_tasks(lambda: arq_of(host.url, arq)["state"] == "BindFailed")
    region = host.region()
    assert region["function_uuid"] == PRELOADED and region["availability"] == "available"
    assert region["program_phase"] == "failed" and host.programmed == 0
    reason: str = arq_of(host.url, arq)["failure_reason"]
    assert region["program_error"] in reason
    return reason


def test_a_signed_bitstream_is_programmed_and_a_tampered_one_refused(
    store: tuple[str, Uploader],
    tmp_path: Path,
    certs: Path,
    ca: signing.Signer,
    signer: signing.Signer,
) -> None:
    url, upload = store
    host = requiring_host(url, tmp_path, certs, ca)
    data, function = new_gbs()
    tampered = upload(data[:-1] + b"\x00", signer.sign(data))
    reason = refused_bind(host, tampered)
    assert "signature refused (bad_signature)" in reason and tampered in reason

    signed = upload(data, signer.sign(data))
    arq = bind(host, profile(url, fpga_group(signed)), host.region()["rp_uuid"])
    host.run_tasks(lambda: arq_of(url, arq)["state"] == "Bound")
    assert host.programmed == 1 and host.region()["function_uuid"] == function


@pytest.mark.parametrize(
    "reason",
    ["unsigned", "unknown_certificate", "untrusted_certificate", "expired_certificate",
     "unsupported_algorithm", "unsuitable_certificate", "weak_key"],
)  # fmt: skip
def test_each_reason_to_refuse_fails_the_bind(
    store: tuple[str, Uploader],
    tmp_path: Path,
    certs: Path,
    ca: signing.Signer,
    signer: signing.Signer,
    reason: str,
) -> None:
    url, upload = store
    host = requiring_host(url, tmp_path, certs, ca)
    data, _ = new_gbs()
    rogue = signing.certificate_authority()
    properties = {
        "unsigned": {},
        "unknown_certificate": signing.leaf(ca).sign(data),  # not in the directory
        "untrusted_certificate": signing.leaf(rogue).save(certs).sign(data),
        "expired_certificate": signing.leaf(ca, valid_until=-signing.DAY).save(certs).sign(data),
        "unsupported_algorithm": {**signer.sign(data), "img_signature_key_type": "DSA"},
        "unsuitable_certificate": signing.leaf(ca, usage=signing.key_usage(key_agreement=True))
        .save(certs)
        .sign(data),
        "weak_key": signing.leaf(ca, bits=1024).save(certs).sign(data),
    }[reason]
    bitstream = upload(data, properties)
    assert f"signature refused ({reason})" in refused_bind(host, bitstream)


def test_a_listed_project_requires_signatures_another_does_not(
    live_api: str, tmp_path: Path, certs: Path, ca: signing.Signer
) -> None:
    host = requiring_host(
        live_api, tmp_path, certs, ca, verify_signatures=False, require_signatures_projects=["p1"]
    )
    data, function = new_gbs()
    unsigned = local_uploader(live_api)(data, {})
    assert "signature refused (unsigned)" in refused_bind(host, unsigned, P1)
    arq = bind(host, profile(live_api, fpga_group(unsigned)), host.region()["rp_uuid"], P2)
    host.run_tasks(lambda: arq_of(live_api, arq)["state"] == "Bound")
    assert host.programmed == 1 and host.region()["function_uuid"] == function


def test_an_upload_with_a_malformed_signature_is_refused(live_api: str) -> None:
    meta = {"name": "x.gbs", "properties": {"img_signature": "AAAA"}}
    created = call(live_api, "POST", "/v2/bitstreams", json=meta)
    assert created.status_code == 400 and "img_signature_hash_method" in created.text


def test_a_claim_with_a_tampered_bitstream_fails_with_the_reason(
    tmp_path: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    config = {"OS_BITSTREAMS__VERIFY_SIGNATURES": "true",
              "OS_BITSTREAMS__CERTIFICATE_DIR": str(certs),
              "OS_BITSTREAMS__TRUSTED_CERTIFICATE_IDS": ca.id}  # fmt: skip
    with all_in_one(tmp_path / "aio", config=config) as aio:
        data, _ = new_gbs()
        bitstream = local_uploader(aio.url)(data + b"\x00", signer.sign(data))
        name = profile(
            aio.url,
            [
                {
                    "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                    f"trait:CUSTOM_FPGA_INTEL_REGION_{REGION0_TYPE.upper()}": "required",
                    "accel:bitstream_id": bitstream,
                }
            ],
        )
        consumer = str(uuid.uuid4())
        body = {"device_profile_name": name, "consumer_uuid": consumer}
        requests.post(f"{aio.url}/v2/claims", json=body, headers=LATEST, timeout=60)

        def shown() -> dict[str, Any]:
            found: dict[str, Any] = requests.get(
                f"{aio.url}/v2/claims/{consumer}", headers=LATEST, timeout=30
            ).json()
            return found

        wait_for(lambda: shown()["state"] == "failed", 60)
        assert "signature refused (bad_signature)" in shown()["failure_reason"]


def test_the_docs_openssl_and_cli_steps_sign_a_bitstream_that_is_programmed(
    live_api: str, tmp_path: Path
) -> None:
    """docs/bitstreams.md, "Signing a bitstream with openssl" and "With the local store
    and a certificate directory", command by command."""
    data, function = new_gbs()
    (tmp_path / "nlb0.gbs").write_bytes(data)
    (tmp_path / "signer.ext").write_text(SIGNER_EXT)
    steps = [
        "openssl req -x509 -newkey rsa:4096 -nodes -keyout ca.key -out ca.pem -days 3650 "
        "-subj /CN=Example -addext basicConstraints=critical,CA:TRUE "
        "-addext keyUsage=critical,keyCertSign,cRLSign",
        "openssl req -newkey rsa:3072 -nodes -keyout signer.key -out signer.csr -subj /CN=Signer",
        "openssl x509 -req -in signer.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 "
        "-extfile signer.ext -out signer.pem",
        "openssl dgst -sha256 -sign signer.key -sigopt rsa_padding_mode:pss -out nlb0.gbs.sig "
        "nlb0.gbs",
        "openssl base64 -A -in nlb0.gbs.sig -out nlb0.gbs.sig.b64",
    ]
    for step in steps:
        subprocess.run(step.split(), cwd=tmp_path, check=True, capture_output=True)
    certs = tmp_path / "certificates"
    certs.mkdir()
    (certs / "example-ca.pem").write_bytes((tmp_path / "ca.pem").read_bytes())
    (certs / "signer-2026.pem").write_bytes((tmp_path / "signer.pem").read_bytes())
    signature = (tmp_path / "nlb0.gbs.sig.b64").read_text().strip()
    assert (
        main(
            [
                "--os-url",
                live_api,
                "bitstream",
                "upload",
                str(tmp_path / "nlb0.gbs"),
                "--public",
                "-f",
                "value",
                "-c",
                "uuid",
                "--property",
                f"img_signature={signature}",
                "--property",
                "img_signature_hash_method=SHA-256",
                "--property",
                "img_signature_key_type=RSA-PSS",
                "--property",
                "img_signature_certificate_uuid=signer-2026",
            ]
        )
        == 0
    )
    found = call(live_api, "GET", "/v2/bitstreams", params={"function_uuid": function}).json()
    (bitstream,) = found["bitstreams"]
    assert bitstream["properties"]["img_signature"] == signature

    host = Host(live_api, tmp_path / "host")
    for name, value in (
        ("verify_signatures", True),
        ("certificate_dir", str(certs)),
        ("trusted_certificate_ids", ["example-ca"]),
    ):
        host.conf.set_override(name, value, group="bitstreams")
    host.report()
    arq = bind(host, profile(live_api, fpga_group(bitstream["uuid"])), host.region()["rp_uuid"])
    host.run_tasks(lambda: arq_of(live_api, arq)["state"] == "Bound")
    assert host.programmed == 1 and host.region()["function_uuid"] == function
