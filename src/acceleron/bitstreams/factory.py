"""The store ``[bitstreams] backend`` names, built from the configuration."""

from __future__ import annotations

from pathlib import Path

from oslo_config import cfg

from acceleron.bitstreams.base import BitstreamStore
from acceleron.bitstreams.local import LocalStore
from acceleron.db.session import Database
from acceleron.exceptions import BitstreamStoreError


def from_conf(conf: cfg.ConfigOpts, db: Database | None = None) -> BitstreamStore:
    """The configured store; the local one keeps its metadata in ``db``."""
    if conf.bitstreams.backend == "glance":
        # Imported here: openstacksdk takes a second to import and only this backend needs it.
        from acceleron.bitstreams import glance, glance_conf

        return glance.GlanceStore(glance_conf.connect(conf))
    if db is None:
        raise BitstreamStoreError(
            "[bitstreams] backend = local keeps its catalogue in Acceleron's database, which "
            "this process has no access to; use backend = glance here."
        )
    return LocalStore(db, Path(conf.bitstreams.local_dir))


def cache_dir(conf: cfg.ConfigOpts) -> Path:
    """This host's bitstream cache directory (``[bitstreams] cache_dir``)."""
    return Path(conf.bitstreams.cache_dir)
