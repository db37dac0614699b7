"""Where an agent finds the certificates that signatures name, by id.

``[bitstreams] certificate_backend`` chooses:

* ``directory``: files in ``[bitstreams] certificate_dir`` named ``<id>.pem``,
  ``<id>.crt`` or ``<id>.der`` (PEM or DER). The operator put them there, so with no
  ``trusted_certificate_ids`` each one found is trusted as itself.
* ``key_manager``: Barbican, or another castellan key manager, as castellan's
  ``[key_manager]`` (and ``[barbican]``) sections configure it, read with
  castellan's credential from ``[key_manager]``: the way Nova and Glance read
  ``img_signature_certificate_uuid``. Anyone may store a certificate there, so a
  certificate counts only if it is, or is issued by, a ``trusted_certificate_ids`` one.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography import x509
from oslo_config import cfg

from acceleron.bitstreams.signatures import Lookup, Policy
from acceleron.exceptions import BitstreamStoreError

LOG = logging.getLogger(__name__)
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
SUFFIXES = (".pem", ".crt", ".der")
KEY_MANAGER_TIMEOUT = 30.0  # seconds one certificate look-up in the key manager may take


def policy_from_conf(conf: cfg.ConfigOpts) -> Policy:
    """This host's signature policy, from ``[bitstreams]``."""
    section = conf.bitstreams
    from_directory = section.certificate_backend == "directory"
    return Policy(
        verify_all=section.verify_signatures,
        projects=frozenset(section.require_signatures_projects),
        trusted_ids=tuple(section.trusted_certificate_ids),
        certificates=(
            in_directory(Path(section.certificate_dir)) if from_directory else in_key_manager(conf)
        ),
        trust_found=from_directory,
        min_key_bits=section.min_signing_key_bits,
    )


def in_directory(root: Path) -> Lookup:
    def lookup(certificate_id: str) -> x509.Certificate | None:
        if not _SAFE_ID.fullmatch(certificate_id) or ".." in certificate_id:
            return None
        for suffix in SUFFIXES:
            try:
                data = (root / f"{certificate_id}{suffix}").read_bytes()
            except FileNotFoundError:
                continue
            return _load(data, f"{root / certificate_id}{suffix}")
        return None

    return lookup


def _load(data: bytes, where: str) -> x509.Certificate | None:
    try:
        if data.lstrip().startswith(b"-----BEGIN"):
            return x509.load_pem_x509_certificate(data)
        return x509.load_der_x509_certificate(data)
    except ValueError as error:
        LOG.warning("Ignoring %s, not a certificate: %s", where, error)
        return None


def in_key_manager(conf: cfg.ConfigOpts, timeout: float = KEY_MANAGER_TIMEOUT) -> Lookup:
    """Certificates from castellan's key manager; castellan is imported at the first
    look-up (most agents never need it). Castellan's Barbican client sets no timeout, so
    each look-up runs in a thread of its own and is given up after ``timeout`` seconds."""
    state: dict[str, Any] = {}

    def lookup(certificate_id: str) -> x509.Certificate | None:
        return _within(timeout, lambda: fetch(certificate_id), certificate_id)

    def fetch(certificate_id: str) -> x509.Certificate | None:
        from castellan import key_manager
        from castellan.common import exception, utils
        from castellan.common.objects import x_509

        if "api" not in state:
            state["api"] = key_manager.API(conf)
        try:
            found = state["api"].get(utils.credential_factory(conf), certificate_id)
        except exception.ManagedObjectNotFoundError:
            return None
        except exception.CastellanException as error:  # misconfigured, or did not answer
            raise BitstreamStoreError(
                f"The key manager did not give certificate {certificate_id}: {error} (see "
                f"[key_manager] in this host's configuration)"
            ) from error
        if not isinstance(found, x_509.X509):
            LOG.warning(
                "Key manager object %s is a %s, not a certificate",
                certificate_id,
                type(found).__name__,
            )
            return None
        return _load(found.get_encoded() or b"", f"key manager object {certificate_id}")

    return lookup


def _within(
    timeout: float, fetch: Callable[[], x509.Certificate | None], certificate_id: str
) -> x509.Certificate | None:
    """``fetch()``, in a daemon thread given up after ``timeout`` seconds."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            outcome["found"] = fetch()
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error
        finally:
            done.set()

    threading.Thread(target=run, name="key-manager", daemon=True).start()
    if not done.wait(timeout):
        raise BitstreamStoreError(
            f"The key manager did not give certificate {certificate_id} in {timeout:g} s."
        )
    if "error" in outcome:
        raise outcome["error"]
    found: x509.Certificate | None = outcome["found"]
    return found
