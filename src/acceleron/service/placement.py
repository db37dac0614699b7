"""Placement for the API process: ``[placement]`` as options and clients, the syncers
(``service.publish.Syncer``) and the check of a reporting host.

The thread that keeps every host published is ``api.workers.SyncWorker``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.db.session import Database
from acceleron.exceptions import (
    ConfigError,
    InvalidPlacementName,
    PlacementUnavailable,
    UnknownHost,
)
from acceleron.placement import inprocess, names, tree
from acceleron.placement.client import PlacementClient
from acceleron.service.publish import HOST, Syncer, unknown_host_message

LOG = logging.getLogger(__name__)


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


def _client_factory(conf: cfg.ConfigOpts) -> Callable[[], PlacementClient]:
    """Clients for ``[placement]``; nothing is built until the first client is asked for
    (loading the embedded Placement takes a while and a test may bring its own)."""
    if conf.placement.mode == "embedded":
        connection = conf.placement.embedded_connection

        def embedded() -> PlacementClient:
            return PlacementClient(inprocess.direct_adapter(inprocess.placement_app(connection)))

        return embedded

    def remote() -> PlacementClient:
        session, auth = confmod.load_session(conf, "placement")
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, "placement", session=session, auth=auth, raise_exc=False
        )
        return PlacementClient(adapter)

    return remote


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
        self.options = options_from_conf(conf)
        self._new_client = client_factory or _client_factory(conf)
        self._embedded_connection = conf.placement.embedded_connection
        self._lock = threading.Lock()

    def embedded_app(self) -> inprocess.WSGIApp:
        """The embedded Placement's WSGI application (mode = embedded)."""
        return inprocess.placement_app(self._embedded_connection)

    def client(self) -> PlacementClient:
        """A Placement client of its own (for one thread: clients are not shared)."""
        return self._new_client()

    def syncer(self) -> Syncer:
        """A syncer with a client of its own (clients are not shared between threads); all
        of this service's syncers take turns."""
        return Syncer(self.db, self._new_client, self.options,
                      create_compute_nodes=self.mode == "embedded", lock=self._lock)  # fmt: skip

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
