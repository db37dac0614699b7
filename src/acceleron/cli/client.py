"""The REST client the CLI commands use: keystoneauth, noauth or Keystone."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from cliff.command import Command
from keystoneauth1 import adapter, loading, session
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1.noauth import NoAuth

from acceleron.api import microversion

DEFAULT_URL = "http://127.0.0.1:6666"


class CommandError(Exception):
    """A failure the CLI reports in one line, without a traceback."""


def register_arguments(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    group = parser.add_argument_group("API connection")
    group.add_argument(
        "--os-url",
        metavar="URL",
        default=os.environ.get("ACCELERON_URL"),
        help=f"Acceleron API endpoint (env ACCELERON_URL). Default {DEFAULT_URL} without "
        "Keystone, the catalog's accelerator endpoint with it.",
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
        if getattr(options, "os_auth_type", "none") in (None, "none"):
            auth: Any = NoAuth()
            url = options.os_url or getattr(options, "os_endpoint", None) or DEFAULT_URL
        else:
            auth = loading.load_auth_from_argparse_arguments(options)
            url = options.os_url
        sess = session.Session(auth=auth, verify=not getattr(options, "insecure", False))
        self.session = sess
        self.noauth = isinstance(auth, NoAuth)
        self.url = url
        self._adapter = adapter.Adapter(
            sess,
            service_type="accelerator",
            endpoint_override=url,
            default_microversion=options.os_accelerator_api_version,
            raise_exc=False,
        )

    @property
    def adapter(self) -> adapter.Adapter:
        """The keystoneauth adapter for the accelerator API (for library calls)."""
        return self._adapter

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._adapter.request(path, method, **kwargs)
        except ks_exc.ConnectFailure as error:
            raise CommandError(
                f"Cannot reach the Acceleron API at {self.url or 'the catalog endpoint'}: "
                f"{error}. Is it running? (make run starts one.)"
            ) from error
        if response.status_code >= 400:
            raise CommandError(f"{response.status_code}: {_error_detail(response)}")
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


def _error_detail(response: Any) -> str:
    try:
        body = response.json()
        errors = body.get("errors") or []
        if errors:
            return str(errors[0]["detail"])
        return str(json.loads(body["error_message"])["faultstring"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return response.text or response.reason or "error"


def api_client(command: Command) -> ApiClient:
    """The client for a command, from the application's global options."""
    return ApiClient(command.app.options)
