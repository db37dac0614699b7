"""Configuration: one INI file (``acceleron.conf``) plus environment overrides.

Every option Acceleron reads is registered here, so the sample configuration
(``acceleron config sample``) is generated from this module and cannot drift.
Any option can be overridden from the environment as ``OS_<GROUP>__<OPTION>``
(for example ``OS_DATABASE__CONNECTION``); that is oslo.config's own rule.
Later sections (``[placement]``, ``[glance]``, ``[nova]``) hold keystoneauth
session and auth options and are registered by the modules that use them.
"""

from __future__ import annotations

import io
import socket
from collections.abc import Iterable, Sequence

from oslo_config import cfg, generator

PROJECT = "acceleron"

DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<hostname>",
        help="Name of this host. On a compute host it must be the name the compute "
        "service (and Placement) knows the host by.",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/acceleron",
        help="Directory for Acceleron's own files: the SQLite database of the embedded "
        "mode and the local bitstream store.",
    ),
    cfg.StrOpt(
        "auth_strategy",
        default="noauth",
        choices=[
            (
                "noauth",
                "No authentication. Every caller is an admin unless the X-Roles, "
                "X-Project-Id and X-User-Id headers say otherwise. For the embedded mode only.",
            ),
            ("keystone", "Validate tokens with Keystone (see [keystone_authtoken])."),
        ],
        help="How API callers are authenticated.",
    ),
    cfg.BoolOpt("debug", default=False, help="Log at DEBUG level."),
]

API_OPTS: list[cfg.Opt] = [
    cfg.HostAddressOpt("host_ip", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=6666, help="Port the API listens on."),
    cfg.IntOpt(
        "workers", default=1, min=1, help="Number of API worker processes (not in all-in-one)."
    ),
    cfg.URIOpt(
        "public_endpoint",
        help="Base URL clients reach the API at, used in version document links when "
        "the API sits behind a proxy. Defaults to the URL of the incoming request.",
    ),
    cfg.IntOpt(
        "max_limit",
        default=1000,
        min=1,
        help="Largest page a list request may ask for with ?limit=.",
    ),
]

DATABASE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "connection",
        default="sqlite:///$state_path/acceleron.sqlite",
        secret=True,
        help="SQLAlchemy URL of the database: sqlite:///..., "
        "postgresql+psycopg://user:pass@host/db or mysql+pymysql://user:pass@host/db.",
    ),
    cfg.IntOpt("max_pool_size", default=10, min=1, help="Connections kept open per process."),
    cfg.IntOpt("max_overflow", default=20, min=0, help="Extra connections allowed at peak."),
    cfg.IntOpt(
        "connection_recycle_time",
        default=3600,
        help="Seconds after which a pooled connection is replaced.",
    ),
    cfg.IntOpt(
        "sqlite_busy_timeout",
        default=30,
        min=0,
        help="Seconds a SQLite writer waits for the database lock before failing.",
    ),
]

PROFILE_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "max_groups",
        default=32,
        min=1,
        help="Most request groups a device profile may have.",
    ),
    cfg.IntOpt(
        "max_accelerators",
        default=128,
        min=1,
        help="Most accelerators (the sum of resources amounts) one device profile may ask for.",
    ),
]

_OPTS: list[tuple[str | None, list[cfg.Opt]]] = [
    (None, DEFAULT_OPTS),
    ("api", API_OPTS),
    ("database", DATABASE_OPTS),
    ("device_profiles", PROFILE_OPTS),
]


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """Options of every group, for oslo-config-generator and the sample file."""
    return [(group, list(opts)) for group, opts in _OPTS]


def register_opts(conf: cfg.ConfigOpts) -> None:
    for group, opts in _OPTS:
        conf.register_opts(opts, group=group)


def load(
    args: Sequence[str] = (),
    config_files: Iterable[str] | None = None,
    overrides: dict[str, dict[str, object]] | None = None,
) -> cfg.ConfigOpts:
    """Build a parsed configuration.

    ``config_files=None`` means oslo.config's search path for ``acceleron.conf``
    (``~/.acceleron``, ``~/``, ``/etc/acceleron``, ``/etc``); an empty list means
    no file at all. ``overrides`` maps group (``"DEFAULT"`` for none) to values.
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    files = None if config_files is None else list(config_files)
    conf(
        list(args),
        project=PROJECT,
        default_config_files=files,
        default_config_dirs=[] if files is not None else None,
        validate_default_values=True,
    )
    for group, values in (overrides or {}).items():
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    return conf


def sample() -> str:
    """The sample configuration file, generated from the registered options."""
    out = io.StringIO()
    gen_conf = cfg.ConfigOpts()
    generator.register_cli_opts(gen_conf)
    gen_conf(["--namespace", PROJECT, "--wrap-width", "79"])
    generator.generate(gen_conf, output_file=out)
    return out.getvalue()
