"""The CLI's connection options and its client of the API: the one client
(:mod:`acceleron.client.http`), noauth or Keystone, with failures in the CLI's words.

keystoneauth is imported by the functions that use it, not with this module, and its
plugin options (``--os-auth-url``, ...) are registered only when Keystone is in play
(:func:`wants_keystone`): without it a command loads no plugin.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from acceleron import microversion
from acceleron.client.http import AcceleronClient, ApiError, CallFailed, NoEndpoint, Unreachable
from acceleron.connection import base_url, root_cause

if TYPE_CHECKING:
    import requests
    from cliff.command import Command
    from keystoneauth1 import adapter

DEFAULT_URL = "http://127.0.0.1:6666"
URL_ENV = "ACCELERON_URL"
# Session options the CLI takes without Keystone (keystoneauth's names, and meanings).
_TLS_FILES = (
    ("--os-cacert", "CA bundle to verify the API's certificate with"),
    ("--os-cert", "Client certificate (PEM)"),
    ("--os-key", "Client key (PEM)"),
)
# Options of the CLI's own and of the session: none of them asks for Keystone.
_NOT_KEYSTONE = ("--os-url", "--os-accelerator-api-version", "--os-endpoint",
                 *(name for name, _ in _TLS_FILES))  # fmt: skip
T = TypeVar("T")


class CommandError(Exception):
    """A failure the CLI reports in one line, without a traceback."""


def wants_keystone(argv: Sequence[str], environ: Mapping[str, str] = os.environ) -> bool:
    """Whether this command may authenticate with Keystone: ``OS_AUTH_URL`` or an
    ``OS_AUTH_TYPE`` other than none is set, or the command line names a Keystone option
    (``--os-auth-url``, ``--os-password``, ...), or it asks for the global help, which
    lists them. Otherwise keystoneauth's plugin options are neither loaded nor offered
    (loading them is most of a command's start-up)."""
    if environ.get("OS_AUTH_URL") or environ.get("OS_AUTH_TYPE", "none") not in ("none", ""):
        return True
    words = [word for word in argv if not word.startswith("-")]
    asks_help = not words and not {"-h", "--help"}.isdisjoint(argv)
    if not argv or words == ["help"] or asks_help:  # the global help
        return True
    options = (word.split("=", 1)[0] for word in argv)
    return any(o.startswith("--os-") and o not in _NOT_KEYSTONE for o in options)


def register_arguments(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    group = parser.add_argument_group("API connection")
    group.add_argument(
        "--os-url",
        metavar="URL",
        help=f"Acceleron API endpoint, with or without /v2 (env {URL_ENV}). Default "
        f"{DEFAULT_URL} without Keystone, the catalog's accelerator endpoint with it.",
    )
    group.add_argument(
        "--os-accelerator-api-version",
        metavar="VERSION",
        default=os.environ.get("OS_ACCELERATOR_API_VERSION", str(microversion.MAX_VERSION)),
        help="Microversion to ask for (env OS_ACCELERATOR_API_VERSION).",
    )
    if not wants_keystone(argv):
        _register_noauth_arguments(group)
        return
    from keystoneauth1 import loading

    default_auth = os.environ.get("OS_AUTH_TYPE") or (
        "password" if os.environ.get("OS_AUTH_URL") else "none"
    )
    loading.register_session_argparse_arguments(parser)
    loading.register_auth_argparse_arguments(parser, list(argv), default=default_auth)


def _register_noauth_arguments(group: Any) -> None:
    """The session options keystoneauth would add, without loading keystoneauth."""
    group.add_argument("--insecure", action="store_true", help="Do not verify TLS certificates.")
    for name, text in _TLS_FILES:
        env = f"OS_{name[5:].upper()}"
        group.add_argument(
            name, metavar="PATH", default=os.environ.get(env), help=f"{text} (env {env})."
        )
    group.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="Seconds to wait for each answer of the API.",
    )
    group.add_argument("--os-endpoint", metavar="URL", help=argparse.SUPPRESS)
    group.set_defaults(os_auth_type="none")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """Where the CLI sends its calls (None: the Keystone catalog's endpoint) and where
    that came from, for the messages that name it."""

    url: str | None
    source: str  # "--os-url", "ACCELERON_URL", "the default" or "the Keystone catalog"

    @classmethod
    def of(cls, options: argparse.Namespace, keystone: bool) -> Endpoint:
        # --os-endpoint: the none plugin's URL (a Keystone plugin's own, with Keystone).
        given = options.os_url or (None if keystone else getattr(options, "os_endpoint", None))
        if given:
            return cls(given, "--os-url")
        files = getattr(options, "config_file", None)
        if files:  # the API this configuration serves, even where the catalog names another
            return cls(config_url(files), CONFIG_SOURCE)
        if os.environ.get(URL_ENV):
            return cls(os.environ[URL_ENV], URL_ENV)
        if keystone:
            return cls(None, "the Keystone catalog")
        return cls(DEFAULT_URL, "the default")

    def origin(self) -> str:
        """A sentence on where the URL came from and how to give another."""
        if self.source == "the default":
            return f"That URL is the default: set {URL_ENV} or give --os-url for another."
        if self.source == URL_ENV:
            return f"That URL comes from {URL_ENV}: change it, or give --os-url."
        if self.source == "--os-url":
            return "That URL comes from --os-url."
        if self.source == CONFIG_SOURCE:
            return (
                "That URL comes from --config-file ([api] public_endpoint, else host_ip "
                "and port): --os-url overrides it."
            )
        return "That URL is the Keystone catalog's accelerator endpoint: --os-url overrides it."


CONFIG_SOURCE = "--config-file"


def config_url(files: Sequence[str]) -> str:
    """The API's URL as the configuration files say it is served: ``[api]
    public_endpoint``, else ``http://<host_ip>:<port>``, a wildcard address (0.0.0.0, ::)
    read as this host's loopback."""
    from oslo_config import cfg

    from acceleron import conf as confmod

    try:
        api = confmod.load([], config_files=files).api
        endpoint: str | None = api.public_endpoint
        host, port = str(api.host_ip), int(api.port)
    except cfg.Error as error:
        raise CommandError(f"Configuration error: {error}") from error
    if endpoint:
        return endpoint
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def check_url(endpoint: Endpoint) -> str:
    """The endpoint's URL if it can be the API's root; else a CommandError that names the
    URL, where it came from, and the fix."""
    url = endpoint.url or ""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        example = "http://" + (url.split("://")[-1] or "127.0.0.1:6666")
        raise CommandError(
            f"{url!r} is not a URL: give it with its scheme, e.g. {example}. {endpoint.origin()}"
        )
    path = base_url(parts.path).rstrip("/")
    for wrong, what in (
        ("/placement", "Placement's URL, not Acceleron's"),
        ("/v1", "a version 1 API, which Acceleron does not serve"),
    ):
        if path.endswith(wrong):
            root = urllib.parse.urlunsplit(parts._replace(path=path.removesuffix(wrong)))
            raise CommandError(f"{url} is {what}: give the API's root, {root}. {endpoint.origin()}")
    return url


class ApiClient:
    """The CLI's calls to the API (:class:`~acceleron.client.http.AcceleronClient`), its
    failures turned into CommandError."""

    def __init__(self, options: argparse.Namespace) -> None:
        keystone = getattr(options, "os_auth_type", "none") not in (None, "none")
        self.endpoint = Endpoint.of(options, keystone)
        auth = None
        if keystone:
            from keystoneauth1 import loading

            auth = loading.load_auth_from_argparse_arguments(options)
        self.api = AcceleronClient.connect(
            check_url(self.endpoint) if self.endpoint.url else None,
            auth,
            microversion=options.os_accelerator_api_version,
            verify=_verify(options),
            cert=_cert(options),
            timeout=getattr(options, "timeout", None),
        )
        self.noauth = self.api.noauth

    @property
    def session(self) -> Any:
        """The keystoneauth session (its token, its project, for other services)."""
        return self.api.session

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
            raise api_error(error, self.url, self.endpoint) from error
        except Unreachable as error:
            if self.url and error.url.startswith(self.url):
                raise unreachable(self.url, error, endpoint=self.endpoint) from error
            # Not the API: Keystone, while authenticating or reading the catalog.
            keystone = unreachable(error.url, error, service="Keystone")
            origin = "That URL comes from OS_AUTH_URL or --os-auth-url."
            raise CommandError(f"{keystone} {origin}") from error
        except NoEndpoint as error:
            message = "The Keystone catalog has no accelerator endpoint: give the API's URL"
            raise CommandError(f"{message} (--os-url).") from error
        except CallFailed as error:
            raise CommandError(str(error)) from error


def _verify(options: argparse.Namespace) -> bool | str:
    if getattr(options, "insecure", False):
        return False
    cacert: str | None = getattr(options, "os_cacert", None)
    return cacert or True


def _cert(options: argparse.Namespace) -> str | tuple[str, str] | None:
    cert: str | None = getattr(options, "os_cert", None)
    key: str | None = getattr(options, "os_key", None)
    return (cert, key) if cert and key else cert


def api_error(error: ApiError, url: str | None, endpoint: Endpoint) -> CommandError:
    """An error answer in one line: the API's own message as it is; a bare "Not Found"
    (no route there: not the API's root, or something else answering) names the URL."""
    if error.status != 404 or (error.code is not None and error.detail != "Not Found"):
        return CommandError(error.detail)
    return CommandError(
        f"{url} does not answer as the root of Acceleron's API does (404 "
        f"{error.detail.rstrip('.')}): give the API's root URL. {endpoint.origin()}"
    )


def unreachable(
    url: str | None,
    error: BaseException,
    service: str = "Acceleron",
    endpoint: Endpoint | None = None,
) -> CommandError:
    """The one message for a service that does not answer: the URL tried, the reason,
    what to do, and where the URL came from (``endpoint``); ``--debug`` shows ``error``."""
    where = url or f"the Keystone catalog's {service} endpoint"
    reason = root_cause(error)
    origin = f" {endpoint.origin()}" if endpoint else ""
    if "WRONG_VERSION_NUMBER" in reason and where.startswith("https://"):
        plain = "http://" + where.removeprefix("https://")
        return CommandError(
            f"Cannot reach {service} at {where}: it does not answer TLS (an "
            f"all-in-one serves plain HTTP): try {plain}.{origin}"
        )
    message = f"Cannot reach {service} at {where} ({reason[:1].lower()}{reason[1:].rstrip('.')})"
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        message += ": give its CA with --os-cacert, or --insecure not to check it."
    elif service == "Acceleron" and endpoint is not None and endpoint.source == CONFIG_SOURCE:
        message += ": is the API that configuration describes running?"
    elif service == "Acceleron":
        message += ". Is it running? `make run` starts one."
    else:
        message += "."
    return CommandError(message + origin)


def connection_failure(error: BaseException) -> BaseException | None:
    """The connection error ``error`` was raised from, if any: the client's Unreachable
    or keystoneauth's (the claim flow and Placement's client wrap them in their own
    errors). keystoneauth is not loaded for it: unloaded, it raised nothing."""
    lost: tuple[type[BaseException], ...] = (Unreachable,)
    if "keystoneauth1.exceptions" in sys.modules:
        from keystoneauth1 import exceptions as ks_exc

        lost += (ks_exc.ConnectionError,)
    current: BaseException | None = error
    while current is not None:
        if isinstance(current, lost):
            return current
        current = current.__cause__
    return None


def api_client(command: Command) -> ApiClient:
    """The client for a command, from the application's global options."""
    return ApiClient(command.app.options)
