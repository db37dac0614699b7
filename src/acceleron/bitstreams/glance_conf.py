"""The ``[glance]`` section: how Acceleron reaches Glance, with keystoneauth.

The section holds keystoneauth's session options (TLS, timeout), auth options
(``auth_type`` plus that plugin's own options, e.g. ``auth_url``, ``username``,
``password``, ``project_name``) and adapter options (``service_type``,
``valid_interfaces``, ``region_name``, ``endpoint_override``), the same names
as in Nova's or Cinder's ``[glance]``. Nothing is read from ``clouds.yaml``.
A Glance without Keystone is reached with ``auth_type = none`` and
``endpoint_override = http://host:9292``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

from acceleron.exceptions import BitstreamStoreError

if TYPE_CHECKING:  # openstacksdk takes a second to import; list_opts() needs none of it
    from openstack.connection import Connection

GROUP = "glance"
_DEFAULTS = {"service_type": "image", "valid_interfaces": ["internal", "public"]}


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Register the ``[glance]`` options; safe to call again."""
    ks_loading.register_session_conf_options(conf, GROUP)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP, include_deprecated=False)
    for name, value in _DEFAULTS.items():
        conf.set_default(name, value, group=GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The ``[glance]`` options for a sample file (with the password plugin's as example)."""
    opts = (
        ks_loading.get_session_conf_options()
        + ks_loading.get_auth_common_conf_options()
        + ks_loading.get_auth_plugin_conf_options("password")
        + ks_loading.get_adapter_conf_options(include_deprecated=False)
    )
    cfg.set_defaults(opts, **_DEFAULTS)
    return [(GROUP, opts)]


def connect(conf: cfg.ConfigOpts) -> Connection:
    """An openstacksdk connection to the image service the ``[glance]`` section describes."""
    from openstack.connection import Connection

    register_opts(conf)
    auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
    if auth is None:
        raise BitstreamStoreError(
            "[bitstreams] backend = glance, but [glance] auth_type is not set: set it (for "
            "example to 'password' with auth_url, username, password and project_name, or to "
            "'none' with endpoint_override for a Glance without Keystone)."
        )
    session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
    return Connection(
        session=session, oslo_conf=conf, service_types=["image"], app_name="acceleron"
    )
