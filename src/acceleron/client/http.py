"""The one HTTP client of the Acceleron API: what the CLI, the agent, the scheduler
(claims and Nova's weigher) and os_acc send their calls through.

:class:`AcceleronClient` wraps a keystoneauth adapter for the ``accelerator`` service:
noauth with a URL (the all-in-one), or a Keystone session that finds the API in the
catalog; :meth:`AcceleronClient.connect` without Keystone carries the calls with the
standard library instead (:mod:`acceleron.client.plain`: the CLI's start-up). It does,
once for every caller:

* the API root: the URL given, or the catalog's endpoint looked up on the first call,
  without the ``/v2`` that catalogs register (every path here starts with it);
* the microversion header (the adapter's default, or one per call);
* a timeout on every call (the session's, or :data:`DEFAULT_TIMEOUT`);
* failures as two families of exceptions: :class:`CallFailed` when no answer came from
  the API (:class:`Unreachable`, :class:`KeystoneError`, :class:`NoEndpoint`), and
  :class:`ApiError` for the API's own error answers (its status, code and detail).

Callers keep their own words for what failed (the CLI's one-line errors, the agent's
retry-or-not classes, os_acc's spec 000 errors): each maps these exceptions in one
place. Retrying is theirs too (the agent's loops back off; the others do not retry).

keystoneauth is imported by the functions that use it, not with this module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acceleron.client.errors import parse_error
from acceleron.connection import base_url, root_cause

if TYPE_CHECKING:
    from keystoneauth1 import adapter as ks_adapter
    from oslo_config import cfg

SERVICE_TYPE = "accelerator"
# Seconds a call waits for the API to answer (a socket read, not a whole transfer),
# where neither the caller nor the keystoneauth session says otherwise.
DEFAULT_TIMEOUT = 120.0
CATALOG = "the catalog's accelerator API"  # where the API is, before it is looked up
NO_ENDPOINT = "the Keystone catalog has no 'accelerator' endpoint"


class ApiError(Exception):
    """The API answered an error: ``status``, its ``code`` (None for a body that is not
    the API's) and ``detail``; ``str()`` is "<status> <detail>"."""

    def __init__(self, status: int, detail: str, code: str | None = None) -> None:
        super().__init__(f"{status} {detail}")
        self.status = status
        self.detail = detail
        self.code = code

    @classmethod
    def of(cls, response: Any) -> ApiError:
        """The error an answer carries (a requests Response)."""
        body = parse_error(response.text, response.reason)
        return cls(response.status_code, body.detail, body.code)


class CallFailed(Exception):
    """No answer came from the API: the call could not be made."""


class Unreachable(CallFailed):
    """The API (or Keystone) did not answer: refused, unknown, or timed out. ``url``:
    the address that did not answer; ``reason``: the innermost cause."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason


class KeystoneError(CallFailed):
    """Keystone answered an error while authenticating (``status``: its HTTP status)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


class NoEndpoint(CallFailed):
    """The Keystone catalog has no accelerator endpoint (or the options cannot find one)."""


class OptionsError(Exception):
    """The ``[agent]`` connection options cannot work (an auth plugin's option missing)."""


class AcceleronClient:
    """Calls to the Acceleron API through ``adapter`` (a keystoneauth Adapter for the
    accelerator service, made with ``raise_exc=False`` or not: calls here never raise
    for an answer's status)."""

    def __init__(self, adapter: ks_adapter.Adapter, timeout: float | None = None) -> None:
        self._adapter = adapter
        session_timeout = getattr(adapter.session, "timeout", None)
        self.timeout = timeout or session_timeout or DEFAULT_TIMEOUT
        self.url: str | None = None
        if adapter.endpoint_override:  # paths start with /v2: the root, without it
            self.url = adapter.endpoint_override = base_url(adapter.endpoint_override)

    @classmethod
    def connect(
        cls,
        url: str | None = None,
        auth: Any = None,
        microversion: str | None = None,
        verify: bool | str = True,
        timeout: float | None = None,
        cert: str | tuple[str, str] | None = None,
    ) -> AcceleronClient:
        """A client for the API at ``url`` (with or without /v2) or, with a Keystone
        ``auth`` plugin and no URL, at the catalog's endpoint; noauth without ``auth``.
        ``verify``: whether to check TLS certificates, or the CA bundle to check them
        with; ``cert``: a client certificate (a file, or a file and its key). Without
        ``auth`` and ``cert``, the standard library carries the calls
        (:mod:`acceleron.client.plain`): neither keystoneauth nor requests is loaded."""
        if url and auth is None and cert is None:
            from acceleron.client.plain import PlainAdapter

            plain = PlainAdapter(base_url(url), microversion, verify, timeout)
            return cls(plain)  # type: ignore[arg-type]  # what the client asks of an Adapter
        from keystoneauth1 import adapter, session
        from keystoneauth1.noauth import NoAuth

        sess = session.Session(auth=auth or NoAuth(), verify=verify, timeout=timeout, cert=cert)
        api = adapter.Adapter(
            sess,
            service_type=SERVICE_TYPE,
            endpoint_override=base_url(url) if url else None,
            default_microversion=microversion,
            raise_exc=False,
        )
        return cls(api)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts, microversion: str) -> AcceleronClient:
        """A client as a compute host reaches the API (its agent, os_acc): from the
        ``[agent]`` group's keystoneauth session, auth and adapter options, plus
        ``api_endpoint``; without ``auth_type``, the embedded API's endpoint by default.
        Nothing is contacted yet; OptionsError when the options cannot work."""
        from keystoneauth1 import exceptions as ks_exc
        from keystoneauth1 import loading as ks_loading
        from keystoneauth1.noauth import NoAuth

        from acceleron import conf as confmod

        try:
            session, auth = confmod.load_session(conf, "agent")
        except ks_exc.ClientException as error:
            raise OptionsError(f"[agent] authentication options: {error}") from error
        endpoint = conf.agent.api_endpoint or conf.agent.endpoint_override
        if endpoint is None and (auth is None or isinstance(auth, NoAuth)):
            endpoint = confmod.AGENT_DEFAULT_ENDPOINT
        try:
            adapter = ks_loading.load_adapter_from_conf_options(
                conf,
                "agent",
                session=session,
                auth=auth,
                endpoint_override=endpoint,
                default_microversion=microversion,
                raise_exc=False,
            )
        except TypeError as error:  # keystoneauth's word for contradictory adapter options
            raise OptionsError(f"[agent] adapter options: {error}") from error
        return cls(adapter)

    @property
    def session(self) -> Any:
        """The keystoneauth session (its token, its project, for other services)."""
        return self._adapter.session

    @property
    def noauth(self) -> bool:
        """Whether calls go without a token (the API's noauth mode)."""
        auth = self._adapter.auth or getattr(self._adapter.session, "auth", None)
        if auth is None:
            return True
        from keystoneauth1.noauth import NoAuth

        return isinstance(auth, NoAuth)

    @property
    def where(self) -> str:
        """The API's address for messages (the catalog's, until it has been looked up)."""
        return self.url or CATALOG

    @property
    def configured_adapter(self) -> ks_adapter.Adapter:
        """The adapter as configured: its endpoint not looked up yet."""
        return self._adapter

    @property
    def adapter(self) -> ks_adapter.Adapter:
        """The adapter, its endpoint looked up (for libraries that take one)."""
        self.resolve()
        return self._adapter

    def resolve(self) -> str:
        """The API root: the URL given, or the catalog's accelerator endpoint without its
        /v2 (looked up once). CallFailed when it cannot be found."""
        if self.url is not None:
            return self.url
        found = self._transport(self._adapter.get_endpoint)
        if not found:
            raise NoEndpoint(NO_ENDPOINT)
        self.url = base_url(found)
        self._adapter.endpoint_override = self.url
        return self.url

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call (``path`` from the root: ``/v2/...``); the answer, a requests Response,
        whatever its status. ``kwargs``: keystoneauth's (``json``, ``params``, ``headers``,
        ``microversion``, ``timeout``, ``stream``, ``authenticated``). CallFailed when no
        answer came."""
        kwargs["raise_exc"] = False
        kwargs.setdefault("timeout", self.timeout)
        self.resolve()
        return self._transport(self._adapter.request, path, method, **kwargs)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One call whose answer is JSON (None for an empty one); ApiError for an error
        answer, CallFailed for none."""
        response = self.check(self.send(method, path, **kwargs))
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    @staticmethod
    def check(response: Any) -> Any:
        """``response``, unless it is an error answer: ApiError then."""
        if response.status_code >= 400:
            raise ApiError.of(response)
        return response

    def _transport(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)``, keystoneauth's failures as CallFailed
        (keystoneauth is imported only when one happened: a plain transport has none)."""
        try:
            return function(*args, **kwargs)
        except CallFailed:
            raise
        except Exception as error:
            from keystoneauth1 import exceptions as ks_exc

            if isinstance(error, ks_exc.ConnectionError):  # refused, unknown name, timed out
                raise Unreachable(error_url(error, self.where), root_cause(error)) from error
            if isinstance(error, ks_exc.HttpError):  # from Keystone, while authenticating
                status = error.http_status
                raise KeystoneError(f"Keystone answered {status}: {error}", status) from error
            if isinstance(error, ks_exc.EndpointNotFound):
                raise NoEndpoint(NO_ENDPOINT) from error
            if isinstance(error, ks_exc.ClientException):  # options that cannot work
                raise CallFailed(str(error)) from error
            raise


def as_client(api: AcceleronClient | ks_adapter.Adapter) -> AcceleronClient:
    """``api`` as a client (a keystoneauth Adapter is wrapped)."""
    return api if isinstance(api, AcceleronClient) else AcceleronClient(api)


def error_url(error: BaseException, default: str) -> str:
    """The URL a keystoneauth connection error was about (Keystone's or the API's)."""
    words = [w.rstrip(":") for w in str(error).split() if w.startswith(("http://", "https://"))]
    return words[0] if words else default
