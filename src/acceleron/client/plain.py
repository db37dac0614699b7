"""A client's transport without Keystone: the Python standard library's HTTP, for the
CLI against an API that checks no token (the all-in-one, ``auth_strategy = noauth``).

keystoneauth and requests take a third of a CLI command's start-up to import; a call
without a token needs neither. :class:`PlainAdapter` does, for
:class:`~acceleron.client.http.AcceleronClient`, what it asks of a keystoneauth Adapter
(``request``, ``endpoint_override``, ``session.timeout``), and its answers read as a
requests Response does where the clients read them (``status_code``, ``reason``,
``headers``, ``content``, ``text``, ``json()``, ``iter_content()``, ``with``). A
connection that fails is :class:`~acceleron.client.http.Unreachable` at once.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

from acceleron.connection import root_cause
from acceleron.microversion import HEADER

SERVICE_TYPE = "accelerator"


class PlainResponse:
    """An answer, read whole unless it was asked for as a stream."""

    def __init__(self, connection: http.client.HTTPConnection, stream: bool) -> None:
        self._connection = connection
        self._answer = connection.getresponse()
        self.status_code = self._answer.status
        self.reason = self._answer.reason
        self.headers = self._answer.headers
        self._content = None if stream else self._read_all()

    def _read_all(self) -> bytes:
        try:
            return self._answer.read()
        finally:
            self.close()

    @property
    def content(self) -> bytes:
        if self._content is None:
            self._content = self._read_all()
        return self._content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    def iter_content(self, chunk_size: int) -> Iterator[bytes]:
        """The body in chunks; a body cut short raises ConnectionError."""
        try:
            while chunk := self._answer.read(chunk_size):
                yield chunk
        except http.client.IncompleteRead as error:
            raise ConnectionError(f"the answer ended early: {error}") from error
        finally:
            self.close()
        missing = self._answer.length  # of the Content-Length, what never came
        if missing:
            raise ConnectionError(f"the answer ended {missing} bytes early")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> PlainResponse:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class PlainSession:
    """What the client reads of a session: its timeout, and no auth."""

    auth = None

    def __init__(self, timeout: float | None) -> None:
        self.timeout = timeout


class PlainAdapter:
    """Calls to the API at ``url`` (its root), one connection each, no token."""

    auth = None

    def __init__(
        self,
        url: str,
        microversion: str | None = None,
        verify: bool | str = True,
        timeout: float | None = None,
    ) -> None:
        self.endpoint_override = url
        self.session = PlainSession(timeout)
        self._microversion = microversion
        self._verify = verify

    def get_endpoint(self) -> str:
        return self.endpoint_override

    def request(self, path: str, method: str, **kwargs: Any) -> PlainResponse:
        """``method path`` with keystoneauth's keywords (``json``, ``data``, ``params``,
        ``headers``, ``microversion``, ``timeout``, ``stream``; others are no concern
        without a token)."""
        from acceleron.client.http import Unreachable

        url = urllib.parse.urlsplit(self.endpoint_override + path)
        target = url.path + _query(url.query, kwargs.get("params"))
        headers = {"Accept": "application/json", **(kwargs.get("headers") or {})}
        version = kwargs.get("microversion") or self._microversion
        if version:
            headers[HEADER] = f"{SERVICE_TYPE} {version}"
        body = kwargs.get("data")  # bytes, or a stream with a length (an upload)
        if body is not None and hasattr(body, "__len__"):
            headers["Content-Length"] = str(len(body))
        if kwargs.get("json") is not None:
            body = json.dumps(kwargs["json"]).encode()
            headers["Content-Type"] = "application/json"
        connection = self._connection(url, kwargs.get("timeout") or self.session.timeout)
        try:
            connection.request(method, target, body=body, headers=headers)
            return PlainResponse(connection, bool(kwargs.get("stream")))
        except (OSError, http.client.HTTPException) as error:
            connection.close()
            where = f"{url.scheme}://{url.netloc}{url.path}"
            raise Unreachable(where, root_cause(error)) from error

    def _connection(self, url: urllib.parse.SplitResult, timeout: float | None) -> Any:
        if url.scheme == "http":
            return http.client.HTTPConnection(url.netloc, timeout=timeout)
        context = ssl.create_default_context(
            cafile=self._verify if isinstance(self._verify, str) else None
        )
        if self._verify is False:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return http.client.HTTPSConnection(url.netloc, timeout=timeout, context=context)


def _query(given: str, params: Mapping[str, Any] | None) -> str:
    """The query string: the URL's own, then ``params`` (a list value repeats its key)."""
    pairs = urllib.parse.parse_qsl(given, keep_blank_values=True)
    for key, value in (params or {}).items():
        values = value if isinstance(value, list | tuple) else [value]
        pairs += [(key, str(v)) for v in values if v is not None]
    return "?" + urllib.parse.urlencode(pairs) if pairs else ""
