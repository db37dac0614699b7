"""The agent's API client: ``PUT /v2/hosts/{hostname}/report`` through keystoneauth.

The connection comes from the ``[agent]`` group: keystoneauth's session, auth and
adapter options, plus ``api_endpoint``. Without ``auth_type`` no token is sent
(the API's noauth mode) and the endpoint defaults to the embedded API's. With
it, the agent authenticates as a service user and, unless ``api_endpoint`` is
set, finds the API as the catalog's ``accelerator`` service.

An unchanged report is not sent again: the API answers each report with its digest,
and while the host's scans find the same report the client sends that digest alone
(``PUT /v2/hosts/{hostname}/report/unchanged``); the whole report again when the API
knows another (409 ``acceleron.report_unknown``) or is of a release without it (404).

Every failure becomes one of three exceptions, which the loop handles:
``ApiUnavailable`` (retry with backoff), ``UnknownHost`` (stop: the host name is
wrong) and ``ReportRefused`` (log it; the next scan tries again).

Formats (``acceleron.formats``): every call says in ``Acceleron-Agent-Formats`` which
report and task formats this agent speaks, and every successful answer says the API's
(an answer without the header comes from an API older than versions). Until the first
answer the client writes the formats every API reads (those of before versions); then
the newest version both sides know, so that an agent newer than its API (the API was
rolled back, or the agents were upgraded first) still works. When the API refuses a
format (409 ``acceleron.unsupported_format``), or this agent writes none of the majors
assumed, it asks ``GET /v2`` what the API speaks.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from keystoneauth1 import adapter as ks_adapter
from oslo_config import cfg

from acceleron import formats
from acceleron.bitstreams.transfer import CHUNK_SIZE
from acceleron.client.errors import parse_error
from acceleron.client.http import (
    AcceleronClient,
    CallFailed,
    KeystoneError,
    NoEndpoint,
    Unreachable,
    as_client,
)
from acceleron.exceptions import AcceleronError
from acceleron.microversion import V2_5, V2_8
from acceleron.report import HostReport, newest_kind, to_bytes

LOG = logging.getLogger(__name__)
MICROVERSION = V2_5  # host reports
TASKS_MICROVERSION = V2_8  # tasks and bitstream bytes
UNKNOWN_HOST = "acceleron.unknown_host"
UNSUPPORTED_FORMAT = "acceleron.unsupported_format"
REPORT_UNKNOWN = "acceleron.report_unknown"


class ReportError(Exception):
    """A report did not go through; ``str()`` says why, in one line."""


class ApiUnavailable(ReportError):
    """The API (or Keystone) is unreachable, timed out or answered 5xx: retry later."""


class ApiUnreachable(ApiUnavailable):
    """No answer at all (connection refused or timed out): ``probe`` tells when it is back."""


class ReportRefused(ReportError):
    """The API answered 4xx: a bug in the report or a configuration problem."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code


class UnknownHost(ReportRefused):
    """The API knows no compute node by this host name (409 acceleron.unknown_host)."""

    def __init__(self, hostname: str, detail: str) -> None:
        super().__init__(detail, 409, UNKNOWN_HOST)
        self.hostname = hostname
        self.detail = detail


def error_for(hostname: str, status: int, text: str, reason: str = "") -> ReportError:
    """The exception for a non-2xx answer to a report."""
    body = parse_error(text, reason)
    if status == 409 and body.code == UNKNOWN_HOST:
        return UnknownHost(hostname, body.detail)
    if status >= 500 or status == 429:
        return ApiUnavailable(f"the API answered {status}: {body.detail}")
    hint = ""
    if status in (401, 403):
        hint = (
            " Check the [agent] credentials: the agent's user needs the 'service' (or "
            "'admin') role."
        )
    return ReportRefused(
        f"the API refused the report ({status}): {body.detail}{hint}", status, body.code
    )


def unknown_host_message(error: UnknownHost) -> str:
    """The paragraph an operator reads when the agent refuses to start."""
    return (
        f"The Acceleron API does not know this host, {error.hostname!r}, as a compute node: "
        f"{error.detail} The agent must report under the name the compute service (Nova) "
        "and Placement use for this host, often its fully qualified domain name: see "
        "'openstack hypervisor list' or 'openstack compute service list --service "
        "nova-compute'. Set [DEFAULT] host to that name in acceleron.conf and start the "
        "agent again."
    )


class ReportClient:
    """The agent's calls to the API (reports, tasks, bitstream bytes) through ``api``
    (:class:`~acceleron.client.http.AcceleronClient`, or the adapter to wrap in one);
    every failure becomes a ReportError."""

    def __init__(
        self, api: AcceleronClient | ks_adapter.Adapter, ours: formats.Formats = formats.OURS
    ) -> None:
        self.api = as_client(api)
        self.ours = ours
        self.theirs: formats.Formats | None = None  # the API's, once learnt
        # The last report the API took: its host, its digest here, and the API's.
        self._taken: tuple[str, str, str] | None = None

    def api_formats(self) -> formats.Formats:
        """The formats the API speaks, read from ``GET /v2``."""
        response = self.send("GET", "/v2", authenticated=False)
        self.check(response, "reading the API's version document")
        self._learn(response)
        assert self.theirs is not None
        return self.theirs

    def _learn(self, response: Any) -> None:
        """The API's formats from an answer's header (none: those before versions)."""
        header = response.headers.get(formats.HEADER)
        try:
            theirs = formats.Formats.parse(header)
        except AcceleronError as error:
            LOG.warning("Ignoring the API's %s header: %s", formats.HEADER, error)
            return
        if theirs != self.theirs:
            LOG.info("The API at %s speaks %s", self.where, theirs.header())
        self.theirs = theirs

    def _version(self, name: str) -> formats.Version:
        """The version of format ``name`` to write. Until an answer says what the API
        speaks, the oldest it may (the formats before versions), unless this agent writes
        no such major: the API's version document says then."""
        version = self.ours.common(name, self.theirs or formats.UNVERSIONED_FORMATS)
        if version is None and self.theirs is None:
            version = self.ours.common(name, self.api_formats())
        if version is None:
            theirs = self.theirs or formats.UNVERSIONED_FORMATS
            raise ReportRefused(
                f"this agent speaks {name} format {self.ours.describe(name)}, the API at "
                f"{self.where} {theirs.describe(name)}: no major version in common. Run an "
                "agent of a release the API works with.",
                409,
                UNSUPPORTED_FORMAT,
            )
        return version

    def _answered(self, response: Any) -> bool:
        """Learn the API's formats from an answer (again from ``GET /v2`` next time when
        it refused a format: it may have been rolled back or upgraded meanwhile); whether
        it refused one."""
        if response.status_code == 409 and parse_error(response.text).code == UNSUPPORTED_FORMAT:
            self.theirs = None
            return True
        if response.status_code < 300:
            self._learn(response)
        return False

    @property
    def where(self) -> str:
        """The API's address for messages (the catalog's, until it has been looked up)."""
        return self.api.where

    def report(self, report: HostReport) -> dict[str, Any]:
        """PUT the report, in the newest format the API reads; the API's answer (the
        host) on 200. Before the API's formats are known, a report holding a deployable
        kind an older minor leaves out asks the API's version document first: its first
        report is not written without them. While the report is the one the API last
        took, the digest the API answered it with goes instead (``unchanged``)."""
        mine = report.digest()
        if self._taken is not None and self._taken[:2] == (report.hostname, mine):
            answer = self.unchanged(report.hostname, self._taken[2])
            if answer is not None:
                return answer
        if self.theirs is None and newest_kind(report) > formats.UNVERSIONED:
            self.api_formats()
        response = self.send(
            "PUT",
            f"/v2/hosts/{quote(report.hostname, safe='')}/report",
            data=to_bytes(report, self._version(formats.REPORT)),
            headers={"Content-Type": "application/json"},
        )
        self._answered(response)
        if response.status_code >= 300:
            self._taken = None
            raise error_for(report.hostname, response.status_code, response.text, response.reason)
        answer = _json(response)
        digest = answer.get("digest")  # none from an API of a release without it
        self._taken = (report.hostname, mine, digest) if isinstance(digest, str) else None
        return answer

    def unchanged(self, hostname: str, digest: str) -> dict[str, Any] | None:
        """Say the host's report is the one the API answered with ``digest``
        (``PUT .../report/unchanged``): the API's answer; None when the report is to be
        sent whole (the API knows another, or none; or it is of a release without this)."""
        response = self.send(
            "PUT",
            f"/v2/hosts/{quote(hostname, safe='')}/report/unchanged",
            json={"digest": digest},
        )
        self._answered(response)
        if response.status_code < 300:
            return _json(response)
        self._taken = None
        refused = response.status_code == 409 and parse_error(response.text).code == REPORT_UNKNOWN
        if refused or response.status_code in (404, 405):
            return None
        raise error_for(hostname, response.status_code, response.text, response.reason)

    def claim_tasks(self, hostname: str, wait: float) -> list[dict[str, Any]]:
        """The host's unfinished tasks, waiting up to ``wait`` seconds for one to appear."""
        self._version(formats.TASK)
        response = self.send(
            "POST",
            f"/v2/hosts/{quote(hostname, safe='')}/tasks/claim",
            params={"wait": wait},
            microversion=TASKS_MICROVERSION,
            timeout=wait + 30,  # the API holds the request up to wait seconds
        )
        self._answered(response)
        self.check(response, "taking tasks")
        tasks: list[dict[str, Any]] = _json(response).get("tasks", [])
        return tasks

    def update_task(self, uuid: str, **fields: Any) -> dict[str, Any] | None:
        """Report a task's progress or end; None when the API no longer wants it (it was
        cancelled or deleted meanwhile: 404 or 409). Fields the API's task format does
        not have yet are left out."""
        version = self._version(formats.TASK)
        body = {
            k: v
            for k, v in fields.items()
            if v is not None and formats.TASK_REPORT_FIELDS.get(k, (0, 0)) <= version
        }
        response = self.send(
            "PUT", f"/v2/tasks/{quote(uuid, safe='')}", json=body, microversion=TASKS_MICROVERSION
        )
        if self._answered(response):
            self.check(response, f"reporting on task {uuid}")
        if response.status_code in (404, 409):
            LOG.info("Task %s is not wanted any more: %s", uuid, parse_error(response.text).detail)
            return None
        self.check(response, f"reporting on task {uuid}")
        return _json(response)

    @contextlib.contextmanager
    def bitstream_chunks(self, bitstream_id: str) -> Iterator[Iterator[bytes]]:
        """The bytes of a bitstream, streamed from the API in chunks (unverified here)."""
        response = self.send(
            "GET",
            f"/v2/bitstreams/{quote(bitstream_id, safe='')}/data",
            stream=True,
            microversion=TASKS_MICROVERSION,
        )
        try:
            self.check(response, f"fetching bitstream {bitstream_id}")
            yield response.iter_content(CHUNK_SIZE)
        finally:
            response.close()

    def probe(self, timeout: float = 5.0) -> bool:
        """Whether the API answers again: ``GET /v2``, the version document (no token
        checked, no database read), the cheapest question it answers."""
        try:
            response = self.send("GET", "/v2", timeout=timeout, authenticated=False)
        except ReportError:
            return False
        return bool(response.status_code < 500)

    def check(self, response: Any, doing: str) -> None:
        if response.status_code < 300:
            return
        body = parse_error(response.text, response.reason)
        message = f"{doing}: the API answered {response.status_code}: {body.detail}"
        if response.status_code >= 500 or response.status_code == 429:
            raise ApiUnavailable(message)
        raise ReportRefused(message, response.status_code, body.code)

    def send(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request to the API, saying which formats this agent speaks; connection
        and Keystone failures become ReportErrors."""
        kwargs["headers"] = {**kwargs.get("headers", {}), formats.HEADER: self.ours.header()}
        try:
            return self.api.send(method, path, **kwargs)
        except Unreachable as error:
            raise ApiUnreachable(str(error)) from error
        except KeystoneError as error:
            if (error.status or 500) >= 500:
                raise ApiUnavailable(str(error)) from error
            raise ReportRefused(
                f"Keystone refused the agent's credentials: {error.__cause__}"
            ) from error
        except NoEndpoint as error:
            raise ReportRefused(
                f"{error}: register the Acceleron API there, or set [agent] api_endpoint"
            ) from error
        except CallFailed as error:  # options that cannot work
            raise ReportRefused(f"cannot call the API: {error}") from error


def _json(response: Any) -> dict[str, Any]:
    try:
        body: dict[str, Any] = response.json()
    except ValueError:
        body = {}
    return body


def connect(conf: cfg.ConfigOpts) -> ReportClient:
    """A client built from the ``[agent]`` options (nothing is contacted yet);
    OptionsError when they cannot work."""
    return ReportClient(AcceleronClient.from_conf(conf, str(MICROVERSION)))
