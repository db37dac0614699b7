"""Bitstream signatures as an agent checks them: every reason to refuse one, with
certificates made here (a CA and its leaves, an expired leaf, a CA nobody trusts) in a
certificate directory, and signatures made with cryptography and with openssl."""

from __future__ import annotations

import dataclasses
import datetime as dt
import subprocess
import threading
import uuid
from pathlib import Path

import pytest
from cryptography.x509.oid import ExtendedKeyUsageOID
from prometheus_client import REGISTRY

from acceleron import conf as confmod
from acceleron.bitstreams import certificates, signatures
from acceleron.exceptions import BitstreamSignatureRefused, BitstreamStoreError, InvalidInput
from tests.fixtures import signing

DATA = b"\x5a" * 300_000 + b"the end"
CHECKSUM = "sha256-0123"


@pytest.fixture
def bitstream(tmp_path: Path) -> Path:
    path = tmp_path / "bitstream.gbs"
    path.write_bytes(DATA)
    return path


def policy(certs: Path, *trusted: signing.Signer) -> signatures.Policy:
    return signatures.Policy(
        verify_all=True,
        trusted_ids=tuple(t.id for t in trusted),
        certificates=certificates.in_directory(certs),
    )


def refusal(path: Path, properties: dict[str, str], rules: signatures.Policy) -> str:
    before = _count_all()
    with pytest.raises(BitstreamSignatureRefused) as refused:
        signatures.check(path, CHECKSUM, properties, rules, path.parent / "marks")
    assert str(refused.value).startswith(f"signature refused ({refused.value.reason}): ")
    assert _count(refused.value.reason) == before[refused.value.reason] + 1
    return refused.value.reason


def _count(result: str) -> float:
    value = REGISTRY.get_sample_value(
        "acceleron_bitstream_signature_checks_total", {"result": result}
    )
    return value or 0.0


def _count_all() -> dict[str, float]:
    return {r: _count(r) for r in (*signatures.REASONS, "valid", "valid_remembered")}


def test_a_signature_by_a_certificate_the_trusted_ca_issued_verifies_once(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    rules, marks = policy(certs, ca), bitstream.parent / "marks"
    before, signed = _count_all(), signer.sign(DATA)
    signatures.check(bitstream, CHECKSUM, signed, rules, marks)
    assert _count("valid") == before["valid"] + 1
    assert [m.name.split(".")[0] for m in marks.iterdir()] == [CHECKSUM]
    # The same bytes (by checksum) with the same signature are not hashed again...
    signatures.check(bitstream, CHECKSUM, signed, rules, marks)
    assert _count("valid_remembered") == before["valid_remembered"] + 1
    assert _count("valid") == before["valid"] + 1
    # ...but the certificate is checked every time: gone from the directory, refused.
    (certs / f"{signer.id}.pem").unlink()
    assert refusal(bitstream, signed, rules) == signatures.UNKNOWN_CERTIFICATE


def test_other_hash_methods_and_an_ecc_key_verify(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    ecc = signing.leaf(ca, kind="ecc").save(certs)
    for method in ("SHA-384", "SHA-512"):
        signatures.check(
            bitstream,
            CHECKSUM,
            ecc.sign(DATA, method),
            policy(certs, ca),
            bitstream.parent / "marks",
        )


def test_bytes_other_than_those_signed_are_refused(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    tampered = signer.sign(DATA[:-1] + b"?")
    assert refusal(bitstream, tampered, policy(certs, ca)) == signatures.BAD_SIGNATURE
    garbled = {**signer.sign(DATA), "img_signature": "not base64!"}
    assert refusal(bitstream, garbled, policy(certs, ca)) == signatures.BAD_SIGNATURE


def test_an_unsigned_or_half_signed_bitstream_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    assert refusal(bitstream, {}, policy(certs, ca)) == signatures.UNSIGNED
    half = signer.sign(DATA)
    del half["img_signature_certificate_uuid"]
    assert refusal(bitstream, half, policy(certs, ca)) == signatures.UNSIGNED


def test_an_unknown_certificate_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    stranger = signing.leaf(ca)  # issued by the trusted CA, but not in the directory
    assert refusal(bitstream, stranger.sign(DATA), policy(certs, ca)) == (
        signatures.UNKNOWN_CERTIFICATE
    )
    (certs / "broken.pem").write_text("-----BEGIN CERTIFICATE-----\nnonsense\n")
    broken = {**stranger.sign(DATA), "img_signature_certificate_uuid": "broken"}
    assert refusal(bitstream, broken, policy(certs, ca)) == signatures.UNKNOWN_CERTIFICATE
    escape = {**stranger.sign(DATA), "img_signature_certificate_uuid": "../certs/" + ca.id}
    assert refusal(bitstream, escape, policy(certs, ca)) == signatures.UNKNOWN_CERTIFICATE


def test_a_certificate_of_an_untrusted_ca_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    rogue = signing.certificate_authority("Acceleron test CA")  # the same name, another key
    impostor = signing.leaf(rogue).save(certs)
    rogue.save(certs)
    assert refusal(bitstream, impostor.sign(DATA), policy(certs, ca)) == (
        signatures.UNTRUSTED_CERTIFICATE
    )
    # Trusting the rogue CA's leaf itself, or the rogue CA, makes it count.
    for trusted in (impostor, rogue):
        signatures.check(
            bitstream,
            CHECKSUM,
            impostor.sign(DATA),
            policy(certs, trusted),
            bitstream.parent / "marks",
        )


def test_a_leaf_does_not_issue_and_a_key_manager_certificate_needs_trust(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    grandchild = signing.leaf(signer).save(certs)  # signed by a certificate that is no CA
    assert refusal(bitstream, grandchild.sign(DATA), policy(certs, signer)) == (
        signatures.UNTRUSTED_CERTIFICATE
    )
    from_key_manager = dataclasses.replace(policy(certs), trust_found=False)
    assert refusal(bitstream, signer.sign(DATA), from_key_manager) == (
        signatures.UNTRUSTED_CERTIFICATE
    )
    # With nothing listed, a certificate in the operator's directory is trusted.
    signatures.check(
        bitstream, CHECKSUM, signer.sign(DATA), policy(certs), bitstream.parent / "marks"
    )


def test_an_expired_or_not_yet_valid_certificate_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    expired = signing.leaf(ca, valid_from=-10 * signing.DAY, valid_until=-signing.DAY)
    early = signing.leaf(ca, valid_from=signing.DAY, valid_until=10 * signing.DAY)
    for certificate in (expired.save(certs), early.save(certs)):
        assert refusal(bitstream, certificate.sign(DATA), policy(certs, ca)) == (
            signatures.EXPIRED_CERTIFICATE
        )


def test_a_trusted_ca_that_expired_vouches_for_nothing(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    lasting = signing.leaf(ca, valid_until=800 * signing.DAY).save(certs)  # outlives its CA
    signed, marks = lasting.sign(DATA), bitstream.parent / "marks"
    signatures.check(bitstream, CHECKSUM, signed, policy(certs, ca), marks)
    later = dt.datetime.now(dt.UTC) + 400 * signing.DAY  # the CA's year is over
    with pytest.raises(BitstreamSignatureRefused) as refused:
        signatures.check(bitstream, CHECKSUM, signed, policy(certs, ca), marks, now=later)
    assert refused.value.reason == signatures.UNTRUSTED_CERTIFICATE


def test_a_certificate_whose_key_usage_is_not_signing_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    """Issued by the trusted CA for something else (encryption, TLS): refused."""
    for unsuitable, said in (
        (signing.leaf(ca, usage=signing.key_usage(key_encipherment=True)), "digitalSignature"),
        (signing.leaf(ca, extended=(ExtendedKeyUsageOID.SERVER_AUTH,)), "codeSigning"),
        (signing.leaf(ca, extended=(ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,)), "codeSigning"),
    ):
        unsuitable.save(certs)
        with pytest.raises(BitstreamSignatureRefused, match=said) as refused:
            signatures.check(
                bitstream,
                CHECKSUM,
                unsuitable.sign(DATA),
                policy(certs, ca),
                bitstream.parent / "marks",
            )
        assert refused.value.reason == signatures.UNSUITABLE_CERTIFICATE
        assert refusal(bitstream, unsuitable.sign(DATA), policy(certs, ca)) == (
            signatures.UNSUITABLE_CERTIFICATE
        )
    # No extended key usage at all, or code signing among others: it may sign.
    also_code = (ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CODE_SIGNING)
    for suitable in (signing.leaf(ca, extended=None), signing.leaf(ca, extended=also_code)):
        signatures.check(
            bitstream,
            CHECKSUM,
            suitable.save(certs).sign(DATA),
            policy(certs, ca),
            bitstream.parent / "marks",
        )


def test_a_certificate_without_key_usage_counts_only_when_trusted_as_itself(
    bitstream: Path, certs: Path, ca: signing.Signer
) -> None:
    bare = signing.leaf(ca, usage=None, extended=None).save(certs)
    with pytest.raises(BitstreamSignatureRefused, match="states no key usage") as refused:
        signatures.check(
            bitstream, CHECKSUM, bare.sign(DATA), policy(certs, ca), bitstream.parent / "marks"
        )
    assert refused.value.reason == signatures.UNSUITABLE_CERTIFICATE
    # Named itself in trusted_certificate_ids, or put in the directory with none named.
    for trusting in (policy(certs, bare), policy(certs)):
        signatures.check(bitstream, CHECKSUM, bare.sign(DATA), trusting, bitstream.parent / "marks")


def test_a_key_shorter_than_min_signing_key_bits_is_refused(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    short = signing.leaf(ca, bits=1024).save(certs)
    with pytest.raises(BitstreamSignatureRefused, match="1024-bit RSA key") as refused:
        signatures.check(
            bitstream, CHECKSUM, short.sign(DATA), policy(certs, ca), bitstream.parent / "marks"
        )
    assert refused.value.reason == signatures.WEAK_KEY
    assert "[bitstreams] min_signing_key_bits" in str(refused.value)
    assert refusal(bitstream, short.sign(DATA), policy(certs, ca)) == signatures.WEAK_KEY
    lenient = dataclasses.replace(policy(certs, ca), min_key_bits=1024)
    signatures.check(bitstream, CHECKSUM, short.sign(DATA), lenient, bitstream.parent / "m")
    strict = dataclasses.replace(policy(certs, ca), min_key_bits=3072)
    assert refusal(bitstream, signer.sign(DATA), strict) == signatures.WEAK_KEY
    # An ECC key is as long as its curve, which the key types already choose.
    ecc = signing.leaf(ca, kind="ecc").save(certs)
    signatures.check(
        bitstream, CHECKSUM, ecc.sign(DATA, "SHA-384"), strict, bitstream.parent / "marks"
    )


def test_the_minimum_key_size_is_an_option() -> None:
    assert certificates.policy_from_conf(confmod.load([], config_files=[])).min_key_bits == 2048
    bigger: dict[str, dict[str, object]] = {"bitstreams": {"min_signing_key_bits": 3072}}
    conf = confmod.load([], config_files=[], overrides=bigger)
    assert certificates.policy_from_conf(conf).min_key_bits == 3072


def test_unsupported_algorithms_are_refused(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer
) -> None:
    for changed in (
        {"img_signature_hash_method": "SHA3-256"},
        {"img_signature_hash_method": "MD5"},
        {"img_signature_key_type": "ECC_SECP256R1"},
        {"img_signature_key_type": "ECC_SECP384R1"},  # an RSA certificate's signature
    ):
        properties = {**signer.sign(DATA), **changed}
        assert refusal(bitstream, properties, policy(certs, ca)) == (
            signatures.UNSUPPORTED_ALGORITHM
        )


def test_openssl_signatures_verify(
    bitstream: Path, certs: Path, ca: signing.Signer, signer: signing.Signer, tmp_path: Path
) -> None:
    """The commands docs/bitstreams.md gives, with the openssl command line."""
    key = tmp_path / "signer.key"
    key.write_bytes(signer.key_pem())
    sig = tmp_path / "bitstream.sig"
    subprocess.run(
        [
            "openssl",
            "dgst",
            "-sha256",
            "-sign",
            str(key),
            "-sigopt",
            "rsa_padding_mode:pss",
            "-out",
            str(sig),
            str(bitstream),
        ],
        check=True,
    )
    encoded = subprocess.run(
        ["openssl", "base64", "-A", "-in", str(sig)], check=True, capture_output=True, text=True
    ).stdout
    properties = {**signer.sign(DATA), "img_signature": encoded}
    signatures.check(bitstream, CHECKSUM, properties, policy(certs, ca), tmp_path / "marks")


def test_policy_requires_signatures_for_every_project_or_the_listed_ones() -> None:
    some = signatures.Policy(projects=frozenset({"p1"}))
    assert some.required_for("p1") and not some.required_for("p2")
    assert not some.required_for(None)  # an admin's program outside any request
    assert signatures.Policy(verify_all=True).required_for(None)


def test_an_upload_gives_all_four_properties_with_known_names(signer: signing.Signer) -> None:
    good = signer.sign(DATA)
    signatures.check_upload(good)
    signatures.check_upload({"other": "x"})
    for bad, field in (
        ({k: v for k, v in good.items() if k != "img_signature_key_type"}, "missing"),
        ({**good, "img_signature": "no base64!"}, "not base64"),
        ({**good, "img_signature": "A" * 5000}, "at most"),
        ({**good, "img_signature_hash_method": "MD5"}, "not one of"),
        ({**good, "img_signature_key_type": "RSA"}, "not one of"),
    ):
        with pytest.raises(InvalidInput, match=field):
            signatures.check_upload(bad)


def test_a_key_manager_that_cannot_answer_fails_the_look_up_not_the_signature() -> None:
    """Castellan as configured by default: no credential to reach Barbican with."""
    backend: dict[str, dict[str, object]] = {"bitstreams": {"certificate_backend": "key_manager"}}
    conf = confmod.load([], config_files=[], overrides=backend)
    rules = certificates.policy_from_conf(conf)
    assert not rules.trust_found
    with pytest.raises(BitstreamStoreError, match=r"\[key_manager\]"):
        rules.certificates(str(uuid.uuid4()))


def test_a_key_manager_look_up_is_given_up_after_its_timeout() -> None:
    answered = threading.Event()  # set only once the look-up was given up

    def stuck() -> None:
        answered.wait()

    with pytest.raises(BitstreamStoreError, match=r"did not give certificate c1 in 0\.05 s"):
        certificates._within(0.05, stuck, "c1")
    answered.set()
