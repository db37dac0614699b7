"""The store ``[bitstreams] backend`` names, built from the configuration."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.local import LocalStore
from acceleron.db.session import Database
from acceleron.exceptions import BitstreamStoreError

if TYPE_CHECKING:  # openstacksdk takes a second to import; most processes never need it
    from openstack.connection import Connection


def from_conf(conf: cfg.ConfigOpts, db: Database | None = None) -> BitstreamStore:
    """The configured store; the local one keeps its metadata in ``db``."""
    if conf.bitstreams.backend == "glance":
        # Imported here: openstacksdk takes a second to import and only this backend needs it.
        from acceleron.bitstreams import glance

        return glance.GlanceStore(connect_glance(conf))
    if db is None:
        raise BitstreamStoreError(
            "[bitstreams] backend = local keeps its catalogue in Acceleron's database, which "
            "this process has no access to; use backend = glance here."
        )
    return LocalStore(db, Path(conf.bitstreams.local_dir))


def cache_dir(conf: cfg.ConfigOpts) -> Path:
    """This host's bitstream cache directory (``[bitstreams] cache_dir``)."""
    return Path(conf.bitstreams.cache_dir)


def connect_glance(conf: cfg.ConfigOpts) -> Connection:
    """An openstacksdk connection to the image service ``[glance]`` describes (see
    conf.KEYSTONEAUTH_SECTIONS). Nothing is read from clouds.yaml."""
    from openstack.connection import Connection

    session, auth = confmod.load_session(conf, "glance")
    if auth is None:
        raise BitstreamStoreError(
            "[bitstreams] backend = glance, but [glance] auth_type is not set: set it (for "
            "example to 'password' with auth_url, username, password and project_name, or to "
            "'none' with endpoint_override for a Glance without Keystone)."
        )
    return Connection(
        session=session, oslo_conf=conf, service_types=["image"], app_name="acceleron"
    )
