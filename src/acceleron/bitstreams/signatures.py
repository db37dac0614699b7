"""Bitstream signatures, verified on the agent's host just before programming.

A signed bitstream carries Glance's four image signature properties, in either
store: ``img_signature`` (the signature over the bytes, base64),
``img_signature_hash_method`` (SHA-224, SHA-256, SHA-384, SHA-512),
``img_signature_key_type`` (RSA-PSS, DSA, ECC_SECP384R1, ECC_SECP521R1) and
``img_signature_certificate_uuid`` (the id of the signing certificate, looked up
by ``acceleron.bitstreams.certificates``). These are what Nova checks on signed
images, with the same meaning.

``check`` refuses a bitstream with ``BitstreamSignatureRefused`` and one of the
reasons of ``REASONS``: the cheap checks first (names, certificate, dates, key,
trust, what the certificate is for), then the signature over the file's bytes.
The signing certificate must be one for signing: its key usage, where it states
one, allows digitalSignature (one that states none counts only when trusted as
itself, not through its issuer); its extended key usage, where it states one,
includes codeSigning; and an RSA or DSA key is at least ``Policy.min_key_bits``
long (``[bitstreams] min_signing_key_bits``). Cursive, Nova's and Glance's
verifier, checks none of these on the signing certificate (only that an issuer
may sign certificates: basicConstraints CA and keyCertSign); see
docs/bitstreams.md, "What a signing certificate must be".

A file whose bytes (named by their checksum, as in the host's cache) were once
found signed by a key leaves a mark beside the cache, so the same bytes signed
the same way are not hashed again; the certificate checks are made every time,
since time and trust change.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import Prehashed
from cryptography.x509.oid import ExtendedKeyUsageOID

from acceleron import metrics
from acceleron.exceptions import BitstreamSignatureRefused, InvalidInput

LOG = logging.getLogger(__name__)

SIGNATURE_KEY = "img_signature"
HASH_METHOD_KEY = "img_signature_hash_method"
KEY_TYPE_KEY = "img_signature_key_type"
CERTIFICATE_KEY = "img_signature_certificate_uuid"
KEYS = (SIGNATURE_KEY, HASH_METHOD_KEY, KEY_TYPE_KEY, CERTIFICATE_KEY)
# A base64 signature of an RSA key of 16384 bits fits; other values keep the 255 of any property.
SIGNATURE_MAX = 4096

HASH_METHODS: Mapping[str, Callable[[], hashes.HashAlgorithm]] = {
    "SHA-224": hashes.SHA224,
    "SHA-256": hashes.SHA256,
    "SHA-384": hashes.SHA384,
    "SHA-512": hashes.SHA512,
}
KEY_TYPES = ("RSA-PSS", "DSA", "ECC_SECP384R1", "ECC_SECP521R1")

# Why a bitstream was refused: the metric's label and the word in the task's error.
UNSIGNED = "unsigned"
BAD_SIGNATURE = "bad_signature"
UNKNOWN_CERTIFICATE = "unknown_certificate"
UNTRUSTED_CERTIFICATE = "untrusted_certificate"
EXPIRED_CERTIFICATE = "expired_certificate"
UNSUPPORTED_ALGORITHM = "unsupported_algorithm"
UNSUITABLE_CERTIFICATE = "unsuitable_certificate"
WEAK_KEY = "weak_key"
REASONS = (UNSIGNED, BAD_SIGNATURE, UNKNOWN_CERTIFICATE, UNTRUSTED_CERTIFICATE,
           EXPIRED_CERTIFICATE, UNSUPPORTED_ALGORITHM, UNSUITABLE_CERTIFICATE,
           WEAK_KEY)  # fmt: skip

CHUNK = 1 << 20

# A certificate by its id, or None when there is none of that id.
Lookup = Callable[[str], x509.Certificate | None]
_Extension = TypeVar("_Extension", bound=x509.ExtensionType)


@dataclasses.dataclass(frozen=True)
class Signature:
    """The four properties, as given (checked by ``check``, not here)."""

    signature: str
    hash_method: str
    key_type: str
    certificate_id: str

    def describe(self) -> str:
        return f"{self.key_type} over {self.hash_method}, certificate {self.certificate_id}"


@dataclasses.dataclass(frozen=True)
class Policy:
    """What this host demands: signatures for every program, or for some projects' only;
    which certificates it trusts; where it finds them."""

    verify_all: bool = False
    projects: frozenset[str] = frozenset()
    trusted_ids: tuple[str, ...] = ()
    certificates: Lookup = lambda _id: None
    # With no trusted_ids, whether every certificate found is trusted (an operator's
    # directory) or none is (a key manager any user may store certificates in).
    trust_found: bool = True
    # The shortest RSA or DSA key a signing certificate may hold, in bits
    # ([bitstreams] min_signing_key_bits).
    min_key_bits: int = 2048

    def required_for(self, project: str | None) -> bool:
        return self.verify_all or (project is not None and project in self.projects)


def fields(properties: Mapping[str, str]) -> dict[str, str]:
    """The signature properties among ``properties``."""
    return {key: properties[key] for key in KEYS if key in properties}


def of(properties: Mapping[str, str]) -> Signature | None:
    """The signature the properties describe; None if they have none of the four.
    BitstreamSignatureRefused (unsigned) when some are missing."""
    given = fields(properties)
    if not given:
        return None
    missing = [key for key in KEYS if not given.get(key)]
    if missing:
        raise _refused(UNSIGNED, f"its signature lacks {', '.join(missing)}")
    return Signature(*(given[key] for key in KEYS))


def check_upload(properties: Mapping[str, str]) -> None:
    """InvalidInput, naming the property, unless the signature properties an uploader
    gives are complete and name what ``check`` knows."""
    given = fields(properties)
    if not given:
        return
    missing = [key for key in KEYS if not given.get(key)]
    if missing:
        raise InvalidInput(
            f"properties: a signature needs all of {', '.join(KEYS)}; {', '.join(missing)} missing."
        )
    if len(given[SIGNATURE_KEY]) > SIGNATURE_MAX:
        raise InvalidInput(f"properties[{SIGNATURE_KEY!r}]: at most {SIGNATURE_MAX} characters.")
    _decode(given[SIGNATURE_KEY], InvalidInput(f"properties[{SIGNATURE_KEY!r}]: not base64."))
    for key, known in ((HASH_METHOD_KEY, tuple(HASH_METHODS)), (KEY_TYPE_KEY, KEY_TYPES)):
        if given[key] not in known:
            raise InvalidInput(
                f"properties[{key!r}]: {given[key]!r} is not one of {', '.join(known)}."
            )


def check(
    path: Path,
    checksum: str,
    properties: Mapping[str, str],
    policy: Policy,
    marks: Path,
    now: dt.datetime | None = None,
) -> None:
    """Refuse (BitstreamSignatureRefused) unless the file at ``path``, whose bytes have
    ``checksum`` (``<algo>-<hex>``, verified by the caller), is signed as its
    ``properties`` say by a valid, trusted certificate. ``marks``: where verified
    signatures are remembered."""
    try:
        signature = of(properties)
        _check(path, checksum, signature, policy, marks, now or dt.datetime.now(dt.UTC))
    except BitstreamSignatureRefused as refused:
        metrics.BITSTREAM_SIGNATURES.labels(refused.reason).inc()
        raise


def _check(
    path: Path,
    checksum: str,
    signature: Signature | None,
    policy: Policy,
    marks: Path,
    now: dt.datetime,
) -> None:
    if signature is None:
        raise _refused(
            UNSIGNED,
            "it carries no signature (img_signature and its three "
            "companions), and this host requires one",
        )
    hash_method = HASH_METHODS.get(signature.hash_method)
    if hash_method is None or signature.key_type not in KEY_TYPES:
        raise _refused(
            UNSUPPORTED_ALGORITHM,
            f"{signature.key_type} over "
            f"{signature.hash_method} is not a signature this host verifies "
            f"(hash methods {', '.join(HASH_METHODS)}; key types "
            f"{', '.join(KEY_TYPES)})",
        )
    raw = _decode(signature.signature, _refused(BAD_SIGNATURE, "img_signature is not base64"))
    certificate = _certificate(policy, signature.certificate_id)
    _check_dates(certificate, signature.certificate_id, now)
    _check_key(certificate, signature, policy.min_key_bits)
    itself = _check_trust(certificate, signature.certificate_id, policy, now)
    _check_usage(certificate, signature.certificate_id, itself)
    mark = _mark(marks, checksum, raw, signature, certificate)
    if mark.exists():
        metrics.BITSTREAM_SIGNATURES.labels("valid_remembered").inc()
        return
    _verify_bytes(path, raw, hash_method(), certificate, signature)
    metrics.BITSTREAM_SIGNATURES.labels("valid").inc()
    marks.mkdir(parents=True, exist_ok=True)
    mark.touch()


def _refused(reason: str, why: str) -> BitstreamSignatureRefused:
    return BitstreamSignatureRefused(reason, f"signature refused ({reason}): {why}")


def _decode(value: str, error: Exception) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise error from None


def _certificate(policy: Policy, certificate_id: str) -> x509.Certificate:
    certificate = policy.certificates(certificate_id)
    if certificate is None:
        raise _refused(
            UNKNOWN_CERTIFICATE, f"no certificate {certificate_id!r} is known to this host"
        )
    return certificate


def _valid_at(certificate: x509.Certificate, now: dt.datetime) -> bool:
    return certificate.not_valid_before_utc <= now <= certificate.not_valid_after_utc


def _check_dates(certificate: x509.Certificate, certificate_id: str, now: dt.datetime) -> None:
    if now < certificate.not_valid_before_utc:
        raise _refused(
            EXPIRED_CERTIFICATE,
            f"certificate {certificate_id} is valid only "
            f"from {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC",
        )
    if now > certificate.not_valid_after_utc:
        raise _refused(
            EXPIRED_CERTIFICATE,
            f"certificate {certificate_id} expired on "
            f"{certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC",
        )


def _check_key(certificate: x509.Certificate, signature: Signature, min_bits: int) -> None:
    key = certificate.public_key()
    fits = {
        "RSA-PSS": isinstance(key, rsa.RSAPublicKey),
        "DSA": isinstance(key, dsa.DSAPublicKey),
        "ECC_SECP384R1": isinstance(key, ec.EllipticCurvePublicKey)
        and isinstance(key.curve, ec.SECP384R1),
        "ECC_SECP521R1": isinstance(key, ec.EllipticCurvePublicKey)
        and isinstance(key.curve, ec.SECP521R1),
    }
    if not fits[signature.key_type]:
        raise _refused(
            UNSUPPORTED_ALGORITHM,
            f"certificate {signature.certificate_id} holds "
            f"a {type(key).__name__} key, not one for {signature.key_type}",
        )
    # An ECC key is as long as its curve: P-384 and P-521, the key types allow no other.
    if isinstance(key, rsa.RSAPublicKey | dsa.DSAPublicKey) and key.key_size < min_bits:
        kind = "RSA" if isinstance(key, rsa.RSAPublicKey) else "DSA"
        raise _refused(
            WEAK_KEY,
            f"certificate {signature.certificate_id} holds a "
            f"{key.key_size}-bit {kind} key; this host takes {min_bits} bits at "
            f"least ([bitstreams] min_signing_key_bits)",
        )


def _check_trust(
    certificate: x509.Certificate, certificate_id: str, policy: Policy, now: dt.datetime
) -> bool:
    """Refuse a certificate this host does not trust; whether it is trusted as itself
    (True) rather than as issued by a trusted certificate authority (False)."""
    if not policy.trusted_ids:
        if policy.trust_found:
            return True
        raise _refused(
            UNTRUSTED_CERTIFICATE,
            f"certificate {certificate_id} comes from the "
            f"key manager and [bitstreams] trusted_certificate_ids names no "
            f"certificate to trust",
        )
    anchors = [c for c in map(policy.certificates, policy.trusted_ids) if c is not None]
    if certificate in anchors:
        return True
    if any(_issued_by(certificate, anchor, now) for anchor in anchors):
        return False
    raise _refused(
        UNTRUSTED_CERTIFICATE,
        f"certificate {certificate_id} is not one of "
        f"[bitstreams] trusted_certificate_ids, nor issued by one of them that is "
        f"a certificate authority valid now",
    )


def _issued_by(certificate: x509.Certificate, anchor: x509.Certificate, now: dt.datetime) -> bool:
    """Whether ``certificate`` was signed by ``anchor``, a CA valid ``now``."""
    if not _valid_at(anchor, now) or not _may_sign_certificates(anchor):
        return False
    try:
        certificate.verify_directly_issued_by(anchor)
    except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
        return False
    return True


def _may_sign_certificates(certificate: x509.Certificate) -> bool:
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints)
    except x509.ExtensionNotFound:
        return False
    try:
        usage = certificate.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return constraints.value.ca
    return constraints.value.ca and usage.key_cert_sign


def _check_usage(certificate: x509.Certificate, certificate_id: str, itself: bool) -> None:
    """Refuse a certificate that is not for signing: a key usage without
    digitalSignature, none at all unless trusted ``itself``, or an extended key usage
    without codeSigning (anyExtendedKeyUsage does not count)."""
    try:
        usage = _extension(certificate, x509.KeyUsage)
        extended = _extension(certificate, x509.ExtendedKeyUsage)
    except ValueError as error:  # a duplicated or malformed extension
        raise _refused(
            UNSUITABLE_CERTIFICATE,
            f"certificate {certificate_id}'s extensions cannot be read: {error}",
        ) from None
    if usage is None and not itself:
        raise _refused(
            UNSUITABLE_CERTIFICATE,
            f"certificate {certificate_id} states no key "
            f"usage: a certificate trusted through its issuer must allow "
            f"digitalSignature",
        )
    if usage is not None and not usage.digital_signature:
        raise _refused(
            UNSUITABLE_CERTIFICATE,
            f"certificate {certificate_id}'s key usage does not allow digitalSignature",
        )
    if extended is not None and ExtendedKeyUsageOID.CODE_SIGNING not in extended:
        raise _refused(
            UNSUITABLE_CERTIFICATE,
            f"certificate {certificate_id}'s extended key usage does not include codeSigning",
        )


def _extension(certificate: x509.Certificate, kind: type[_Extension]) -> _Extension | None:
    try:
        return certificate.extensions.get_extension_for_class(kind).value
    except x509.ExtensionNotFound:
        return None


def _mark(
    marks: Path, checksum: str, raw: bytes, signature: Signature, certificate: x509.Certificate
) -> Path:
    """The mark that these bytes carry this signature by this certificate's key."""
    key = certificate.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    named = hashlib.sha256()
    for part in (raw, signature.hash_method.encode(), signature.key_type.encode(), key):
        named.update(len(part).to_bytes(8, "big") + part)
    return marks / f"{checksum}.{named.hexdigest()}"


def _verify_bytes(
    path: Path,
    raw: bytes,
    algorithm: hashes.HashAlgorithm,
    certificate: x509.Certificate,
    signature: Signature,
) -> None:
    digest = hashes.Hash(algorithm)
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK):
            digest.update(chunk)
    hashed, key = digest.finalize(), certificate.public_key()
    try:
        if isinstance(key, rsa.RSAPublicKey):
            pss = padding.PSS(mgf=padding.MGF1(algorithm), salt_length=padding.PSS.AUTO)
            key.verify(raw, hashed, pss, Prehashed(algorithm))
        elif isinstance(key, dsa.DSAPublicKey):
            key.verify(raw, hashed, Prehashed(algorithm))
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(raw, hashed, ec.ECDSA(Prehashed(algorithm)))
    except InvalidSignature:
        raise _refused(
            BAD_SIGNATURE,
            f"the signature ({signature.describe()}) does not match the bytes to program",
        ) from None
