"""The CLI's connection options and its client of the API: the one client
(:mod:`acceleron.client.http`), noauth or Keystone, with failures in the CLI's words.

keystoneauth is imported by the functions that use it, not with this module.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from acceleron import microversion
from acceleron.client.http import AcceleronClient, ApiError, CallFailed, NoEndpoint, Unreachable
from acceleron.connection import root_cause

if TYPE_CHECKING:
    import requests
    from cliff.command import Command
    from keystoneauth1 import adapter

DEFAULT_URL = "http://127.0.0.1:6666"
T = TypeVar("T")


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
    """The CLI's calls to the API (:class:`~acceleron.client.http.AcceleronClient`), its
    failures turned into CommandError."""

    def __init__(self, options: argparse.Namespace) -> None:
        from keystoneauth1 import loading

        if getattr(options, "os_auth_type", "none") in (None, "none"):
            auth = None
            url = options.os_url or getattr(options, "os_endpoint", None) or DEFAULT_URL
        else:
            auth = loading.load_auth_from_argparse_arguments(options)
            url = options.os_url
        self.api = AcceleronClient.connect(
            url,
            auth,
            microversion=options.os_accelerator_api_version,
            verify=not getattr(options, "insecure", False),
        )
        self.session = self.api.session
        self.noauth = self.api.noauth

    @property
    def url(self) -> str | None:
        """The API root (None until the catalog has been asked, with Keystone)."""
        return self.api.url

    @property
    def adapter(self) -> adapter.Adapter:
        """The keystoneauth adapter for the accelerator API (for library calls)."""
        return self._failures(lambda: self.api.adapter)

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        """The raw answer (a requests Response); an unreachable API is a CommandError."""
        return self._failures(lambda: self.api.send(method, path, **kwargs))

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._failures(lambda: self.api.call(method, path, **kwargs))

    def stream(self, path: str, **kwargs: Any) -> requests.Response:
        """A download whose body is read in chunks (a bitstream's bytes)."""
        response = self.send("GET", path, stream=True, **kwargs)
        checked: requests.Response = self._failures(lambda: self.api.check(response))
        return checked

    def get(self, path: str, **params: Any) -> Any:
        return self.request("GET", path, params={k: v for k, v in params.items() if v})

    def post(self, path: str, body: Any) -> Any:
        return self.request("POST", path, json=body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, json=body)

    def delete(self, path: str) -> Any:
        return self.request("DELETE", path)

    def _failures(self, call: Callable[[], T]) -> T:
        """``call()``, its failures in the CLI's words."""
        try:
            return call()
        except ApiError as error:
            raise CommandError(f"{error.status}: {error.detail}") from error
        except Unreachable as error:
            raise unreachable(self.url, error) from error
        except NoEndpoint as error:
            message = "The Keystone catalog has no accelerator endpoint: give the API's URL"
            raise CommandError(f"{message} (--os-url).") from error
        except CallFailed as error:
            raise CommandError(str(error)) from error


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
