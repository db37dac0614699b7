"""Placement for the API process: ``[placement]`` as options and clients, the syncers
(``service.publish.Syncer``) and the check of a reporting host.

The thread that keeps every host published is ``api.workers.SyncWorker``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import requests
from keystoneauth1 import loading as ks_loading
from oslo_config import cfg
from sqlalchemy import update

from acceleron import conf as confmod
from acceleron.db import migrate
from acceleron.db.session import Database
from acceleron.exceptions import (
    ConfigError,
    InvalidPlacementName,
    PlacementUnavailable,
    UnknownHost,
)
from acceleron.placement import batch, inprocess, names, tree
from acceleron.placement.client import PlacementClient
from acceleron.service import leases
from acceleron.service.publish import HOST, HOSTS, HostLocks, Syncer, unknown_host_message

LOG = logging.getLogger(__name__)
T = TypeVar("T")
# Seconds between two looks at the contract phase ([placement] pools = auto) while it is
# pending: every API process switches pools on within about this long of the others.
POOLS_RECHECK = 1.0


def options_from_conf(conf: cfg.ConfigOpts) -> tree.Options:
    """``[placement]`` as sync options; ConfigError, naming the option, for a bad value."""
    section = conf.placement
    return tree.Options(
        nested=section.nested,
        standard_classes=section.standard_resource_classes,
        functionality=functionality_from_conf(section.functionality or {}),
    )


def functionality_from_conf(raw: Mapping[str, str]) -> dict[str, str]:
    """``[placement] functionality``: keys folded as the sync compares them
    (:func:`names.fold_key`), values upper-cased and checked."""
    result: dict[str, str] = {}
    for key, value in raw.items():
        where = f"[placement] functionality: in {key}:{value},"
        kind = value.strip().upper()
        if kind not in names.FUNCTIONALITIES:
            choices = ", ".join(names.FUNCTIONALITIES)
            raise ConfigError(f"{where} the functionality must be one of {choices}.")
        try:
            folded = names.fold_key(key)
        except InvalidPlacementName:
            raise ConfigError(
                f"{where} the key must be a device model or a region type: letters, digits, "
                f"spaces, '-' and '_'."
            ) from None
        if result.setdefault(folded, kind) != kind:
            raise ConfigError(f"{where} {folded} already has functionality {result[folded]}.")
    return result


def embedded_tuning(conf: cfg.ConfigOpts) -> inprocess.Tuning:
    """The embedded Placement's options for wide trees, from ``[placement] embedded_*``."""
    section = conf.placement
    return inprocess.Tuning(
        max_candidates=section.embedded_max_candidates,
        strategy=section.embedded_candidate_strategy,
        wide_trees=section.embedded_wide_trees,
    )


def _client_factory(conf: cfg.ConfigOpts) -> Callable[[], PlacementClient]:
    """Clients for ``[placement]``; nothing is built until the first client is asked for
    (loading the embedded Placement takes a while and a test may bring its own)."""
    if conf.placement.mode == "embedded":
        connection, tuning = conf.placement.embedded_connection, embedded_tuning(conf)

        def embedded() -> PlacementClient:
            app = inprocess.placement_app(connection, tuning)
            return PlacementClient(inprocess.direct_adapter(app))

        return embedded

    return _Remote(conf).client


class EnvironmentOnce(requests.Session):
    """A requests session that reads what the environment says of a destination (its
    proxies, bypassed by ``no_proxy`` or not; a CA bundle from ``REQUESTS_CA_BUNDLE``)
    once per destination and call settings, rather than at every call: requests scans
    the whole environment each time, a tenth of the API's CPU while it publishes a
    region. A process's environment does not change under it."""

    def __init__(self) -> None:
        super().__init__()
        self._merged: dict[tuple[Any, ...], dict[str, Any]] = {}

    def merge_environment_settings(
        self, url: Any, proxies: Any, stream: Any, verify: Any, cert: Any
    ) -> dict[str, Any]:
        parts = urlsplit(str(url))
        asked = tuple(sorted((proxies or {}).items()))
        key = (parts.scheme, parts.netloc, asked, stream, verify, cert)
        found = self._merged.get(key)
        if found is None:
            found = super().merge_environment_settings(url, dict(asked), stream, verify, cert)
            self._merged[key] = found
        return {**found, "proxies": dict(found["proxies"])}


class _Remote:
    """Clients of a remote Placement (``[placement]``): one auth plugin for the process,
    whose token is asked of Keystone once and again only when it expires (the plugin
    locks its own renewal), and a keystoneauth session per thread, keeping its
    connections (a requests session is not shared between threads). A plugin of each
    client's own asked Keystone for a token at every claim and every release."""

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        self.conf = conf
        self._lock = threading.Lock()
        self._auth: list[Any] = []  # the plugin, once loaded (None: no auth_type)
        self._local = threading.local()

    def client(self) -> PlacementClient:
        session = getattr(self._local, "session", None)
        if session is None:
            session = ks_loading.load_session_from_conf_options(
                self.conf, "placement", auth=self._plugin(), session=EnvironmentOnce()
            )
            self._local.session = session
        adapter = ks_loading.load_adapter_from_conf_options(
            self.conf, "placement", session=session, auth=session.auth, raise_exc=False
        )
        return PlacementClient(adapter)

    def _plugin(self) -> Any:
        with self._lock:
            if not self._auth:
                confmod.register_keystoneauth(self.conf, "placement")
                self._auth.append(ks_loading.load_auth_from_conf_options(self.conf, "placement"))
            return self._auth[0]


class PlacementService:
    """Placement for the API process (``[placement]``): host checks and syncers."""

    def __init__(
        self,
        conf: cfg.ConfigOpts,
        db: Database,
        client_factory: Callable[[], PlacementClient] | None = None,
    ) -> None:
        self.mode = conf.placement.mode
        self.db = db
        self._options = options_from_conf(conf)
        self._retire_after = float(conf.placement.retired_provider_delay)
        self._sync_lease = float(conf.placement.sync_lease)
        self._pools = conf.placement.pools  # auto, true, false
        self._pools_setting = self._pools  # as configured (auto becomes true when it flips)
        # When auto last found the contract phase pending (monotonic; negative: never).
        self._pools_checked = -POOLS_RECHECK
        self._new_client = client_factory or _client_factory(conf)
        self._embedded_connection = conf.placement.embedded_connection
        self._embedded_tuning = embedded_tuning(conf)
        self._locks = HostLocks()
        self._writes = batch.Writes(turn=inprocess.turns)
        # The periodic passes (verification, reconciler) run where this is held.
        self.periodic = leases.Holder(db)

    @property
    def options(self) -> tree.Options:
        """The sync's options, pools switched on as ``[placement] pools`` says now."""
        return dataclasses.replace(self._options, pools=self.pools_on())

    def pools_on(self) -> bool:
        """Whether pools are published: ``true``; or ``auto`` once this release's contract
        phase is applied (asked again every ``POOLS_RECHECK`` seconds until it is; then
        for good: a contract phase is never undone)."""
        if self._pools != "auto" or not self._options.nested:
            return self._pools == "true" and self._options.nested
        now = time.monotonic()
        if now - self._pools_checked < POOLS_RECHECK:
            return False
        try:
            applied = not migrate.state(self.db).contract.pending
        except Exception as error:  # a schema that cannot be read: not yet
            LOG.warning("Cannot read the schema's contract phase (%s): no pools yet", error)
            applied = False
        if applied:
            LOG.info("The contract phase is applied: publishing identical devices as pools.")
            self._pools = "true"
            if self._pools_checked >= 0:  # it was pending while this process ran
                self._republish()
            return True
        self._pools_checked = now
        return False

    def _republish(self) -> None:
        """Every host to be published again (in pools) at the next sync pass."""
        with self.db.writer() as conn:
            conn.execute(update(HOSTS).values(synced_generation=-1))

    def embedded_app(self) -> inprocess.WSGIApp:
        """The embedded Placement's WSGI application (mode = embedded)."""
        return inprocess.placement_app(self._embedded_connection, self._embedded_tuning)

    def client(self) -> PlacementClient:
        """A Placement client of its own (for one thread: clients are not shared)."""
        return self._new_client()

    def claims_client(self) -> PlacementClient:
        """A client of its own for a claim or its release, whose allocation writes go with
        those of the claims made at the same moment (``placement.batch``)."""
        return self._new_client().batching(self._writes)

    def claiming(self, fn: Callable[..., T]) -> Callable[..., T]:
        """``fn`` (a claim being made or ended, blocking), its allocation write announced
        to the writes of the claims made at the same moment while it runs."""

        def run(*args: Any, **kwargs: Any) -> T:
            with self._writes.announced():
                return fn(*args, **kwargs)

        return run

    def syncer(self) -> Syncer:
        """A syncer with a client of its own (clients are not shared between threads); this
        service's syncers take turns on a host."""
        return Syncer(
            self.db,
            self._new_client,
            self._options,
            pools=self.pools_on,
            keep_pools=self._pools_setting == "auto",
            create_compute_nodes=self.mode == "embedded",
            locks=self._locks,
            retire_after=self._retire_after,
            sync_lease=self._sync_lease,
        )

    def check_host(self, hostname: str) -> None:
        """Refuse a host that the compute service does not know (remote mode only).

        While Placement cannot be reached the report is accepted: the host stays
        pending, and its sync checks it once Placement answers."""
        if self.mode != "remote":
            return
        with self.db.reader() as conn:
            host = conn.execute(HOST, {"host": hostname}).first()
        if host is not None and host.rp_uuid:
            return
        client = self._new_client()
        try:
            found = client.find_provider(hostname)
        except PlacementUnavailable as error:
            LOG.warning("Accepting the report of %s unchecked: %s", hostname, error.message)
            return
        if found is None:
            raise UnknownHost(unknown_host_message(client, hostname))
