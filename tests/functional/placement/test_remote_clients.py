"""Clients of a remote Placement: one Keystone token for the process, a session (and
its connections) per thread."""

from __future__ import annotations

import threading

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.db.session import Database
from acceleron.placement.client import PlacementClient
from acceleron.service.placement import PlacementService
from tests.fixtures.ports import free_port


def test_clients_share_the_auth_plugin_and_a_thread_keeps_its_session(
    conf: cfg.ConfigOpts, db: Database
) -> None:
    """A plugin of each client's own asked Keystone for a token at every claim and every
    release (each takes a client). No request is sent here: building clients asks
    nothing of Keystone or Placement."""
    conf.set_override("mode", "remote", "placement")
    service = PlacementService(conf, db)
    keystone = f"http://127.0.0.1:{free_port()}/v3"
    confmod.register_keystoneauth(conf, "placement")
    conf.set_override("auth_type", "password", "placement")
    conf.register_opts(ks_loading.get_auth_plugin_conf_options("password"), group="placement")
    conf.set_override("auth_url", keystone, "placement")
    conf.set_override("username", "acceleron", "placement")
    conf.set_override("password", "secret", "placement")
    first, second = service.client(), service.client()
    elsewhere: list[PlacementClient] = []
    thread = threading.Thread(target=lambda: elsewhere.append(service.client()))
    thread.start()
    thread.join()
    assert first.adapter.auth is not None
    assert first.adapter.auth is second.adapter.auth is elsewhere[0].adapter.auth
    assert first.adapter.session is second.adapter.session
    assert elsewhere[0].adapter.session is not first.adapter.session
