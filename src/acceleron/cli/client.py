"""The REST client the CLI commands use: keystoneauth, noauth or Keystone.

keystoneauth is imported by the functions that use it, not with this module.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from acceleron.api import microversion
from acceleron.client.errors import parse_error
from acceleron.connection import base_url, root_cause

if TYPE_CHECKING:
    from cliff.command import Command
    from keystoneauth1 import adapter

DEFAULT_URL = "http://127.0.0.1:6666"


class CommandError(Exception):
    """A failure the CLI reports in one line, without a traceback."""


def register_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    from keystoneauth1 import loading

    group = parser.add_argument_group("API connection")
    group.add_argument(
        "--os-url",
        metavar="URL",
        default=os.environ.get("ACCELERON_URL"),
        help=f"Acceleron API endpoint, with or without /v2 (env ACCELERON_URL). Default "
        f"{DEFAULT_URL} without Keystone, the catalog's accelerator endpoint with it.",
    )
    group.add_argument(
        "--os-accelerator-api-version",
        metavar="VERSION",
        default=os.environ.get("OS_ACCELERATOR_API_VERSION", str(microversion.MAX_VERSION)),
        help="Microversion to ask for (env OS_ACCELERATOR_API_VERSION).",
    )
    default_auth = os.environ.get("OS_AUTH_TYPE") or (
        "password" if os.environ.get("OS_AUTH_URL") else "none"
    )
    loading.register_session_argparse_arguments(parser)
    loading.register_auth_argparse_arguments(parser, argv, default=default_auth)


class ApiClient:
    """JSON over HTTP to the Acceleron API, errors turned into CommandError."""

    def __init__(self, options: argparse.Namespace) -> None:
        from keystoneauth1 import adapter, loading, session
        from keystoneauth1.noauth import NoAuth

        if getattr(options, "os_auth_type", "none") in (None, "none"):
            auth: Any = NoAuth()
            url = options.os_url or getattr(options, "os_endpoint", None) or DEFAULT_URL
        else:
            auth = loading.load_auth_from_argparse_arguments(options)
            url = options.os_url
        sess = session.Session(auth=auth, verify=not getattr(options, "insecure", False))
        self.session = sess
        self.noauth = isinstance(auth, NoAuth)
        self.url = base_url(url) if url else None
        self._adapter = adapter.Adapter(
            sess,
            service_type="accelerator",
            endpoint_override=self.url,
            default_microversion=options.os_accelerator_api_version,
            raise_exc=False,
        )

    @property
    def adapter(self) -> adapter.Adapter:
        """The keystoneauth adapter for the accelerator API (for library calls)."""
        self._resolve()
        return self._adapter

    def _resolve(self) -> None:
        """Take the API root from the catalog when no URL was given: catalogs register
        the accelerator endpoint with its /v2, which the CLI's paths carry already."""
        if self.url is not None:
            return
        from keystoneauth1 import exceptions as ks_exc

        try:
            found = self._adapter.get_endpoint()
        except ks_exc.ConnectionError as error:
            raise unreachable(None, error) from error
        if found:
            self.url = base_url(found)
            self._adapter.endpoint_override = self.url

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        """The raw answer (a requests Response); an unreachable API is a CommandError."""
        from keystoneauth1 import exceptions as ks_exc

        self._resolve()
        try:
            return self._adapter.request(path, method, **kwargs)
        except ks_exc.ConnectionError as error:
            raise unreachable(self.url, error) from error

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.send(method, path, **kwargs)
        if response.status_code >= 400:
            raise CommandError(
                f"{response.status_code}: {parse_error(response.text, response.reason).detail}"
            )
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)


def unreachable(url: str | None, error: BaseException, service: str = "Acceleron") -> CommandError:
    """The one message for a service that does not answer; ``--debug`` shows ``error``."""
    where = url or f"the Keystone catalog's {service} endpoint"
    reason = root_cause(error)
    message = f"Cannot reach {service} at {where} ({reason[:1].lower()}{reason[1:]})."
    if service == "Acceleron":
        message += " Is it running? `make run` starts one."
    return CommandError(message)


def connection_failure(error: BaseException) -> BaseException | None:
    """The keystoneauth connection error ``error`` was raised from, if any (the claim
    flow and Placement's client wrap it in their own errors)."""
    from keystoneauth1 import exceptions as ks_exc

    current: BaseException | None = error
    while current is not None:
        if isinstance(current, ks_exc.ConnectionError):
            return current
        current = current.__cause__
    return None


def api_client(command: Command) -> ApiClient:
    """The client for a command, from the application's global options."""
    return ApiClient(command.app.options)
