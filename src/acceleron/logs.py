"""Logging through oslo.log, as in every OpenStack service.

``setup(conf)`` hands the ``[DEFAULT]`` logging options (``debug``, ``log_file``,
``log_dir``, ``use_journal``, ``use_json``, ``default_log_levels``, the format strings,
...) to oslo.log; the options themselves are registered with the rest in
:mod:`acceleron.conf`. With no ``log_file``, ``use_journal`` or ``use_stderr``, lines go
to standard error (oslo.log would pick standard output): a command's own output there,
such as the all-in-one's banner, stays apart from its log.

Every line logged while a request is served carries its request id, and the caller's
user and project once authentication has named them. oslo.log reads these from an
oslo.context request context; oslo.context keeps the current one in a thread-local,
which the API cannot use: its handlers run on the event loop (where one thread serves
every request at once) and in worker threads. So the context lives in a context
variable, which follows each request into the threads that work for it, and a filter on
every handler hands it to the formatter. The variable holds one object per request that
authentication completes in place, so that a thread started before the caller was known
sees the caller as soon as it is.
"""

from __future__ import annotations

import logging
import re
import sys
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

from oslo_context import context as oslo_context
from oslo_log import formatters as oslo_formatters
from oslo_log import log as oslo_log

import acceleron

if TYPE_CHECKING:
    from oslo_config import cfg

    from acceleron.context import RequestContext

# What another service sends as X-OpenStack-Request-ID to be carried as the global request
# id (oslo.middleware's rule): a request id of its own form, nothing else.
_GLOBAL_ID = re.compile(r"req-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


class LogContext(oslo_context.RequestContext):
    """oslo.context's request context, used only for what oslo.log writes of a request.
    It never goes into oslo.context's thread-local store: a thread of the event loop or
    of a pool would show it on lines of later requests."""

    _values: dict[str, Any] | None = None
    _identity: tuple[str, str] | None = None

    def update_store(self) -> None:
        pass

    def get_logging_values(self) -> dict[str, Any]:
        """oslo.context's, kept: oslo.log's formatter asks for them twice a line, and
        they change only when authentication names the caller (``identify``)."""
        return dict(self.kept_values())

    def kept_values(self) -> dict[str, Any]:
        """``get_logging_values``'s, not copied: whoever reads them leaves them as they
        are."""
        if self._values is None:
            self._values = super().get_logging_values()
        return self._values

    def identity(self, form: str) -> str:
        """``form`` (``logging_user_identity_format``) filled from this context, '-' for
        what is empty or unknown, as oslo.log fills it; kept until the caller changes."""
        if self._identity is None or self._identity[0] != form:
            filled = _Dashed({key: value or "-" for key, value in self.kept_values().items()})
            self._identity = (form, form % filled)
        return self._identity[1]

    def named(self, context: RequestContext) -> None:
        """Authentication named the caller: ``context``."""
        self.user_id = context.user_id
        self.project_id = context.project_id
        self.domain_id = context.domain_id
        self.system_scope = context.system_scope
        self.roles = sorted(context.roles)
        self.is_admin = context.is_admin
        self._values = self._identity = None


class _Dashed(dict[str, Any]):
    def __missing__(self, key: str) -> str:
        return "-"


_CURRENT: ContextVar[LogContext | None] = ContextVar("acceleron_log_context", default=None)


def begin(request_id: str, global_request_id: str | None = None) -> Token[LogContext | None]:
    """A request starts: its lines carry ``request_id`` (and ``global_request_id``, the
    X-OpenStack-Request-ID another service sent, when it has the form of one) until
    ``end``."""
    if global_request_id is not None and not _GLOBAL_ID.fullmatch(global_request_id):
        global_request_id = None
    found = LogContext(request_id=request_id, global_request_id=global_request_id, overwrite=False)
    return _CURRENT.set(found)


def end(token: Token[LogContext | None]) -> None:
    _CURRENT.reset(token)


def identify(context: RequestContext) -> RequestContext:
    """Authentication named the caller: the request's lines from now on carry its user
    and project (and, in JSON, its roles). Returns ``context``."""
    current = _CURRENT.get()
    if current is not None:
        current.named(context)
    return context


def current() -> LogContext | None:
    """The context of the request being served here, if any."""
    return _CURRENT.get()


class ContextFilter(logging.Filter):
    """Hands the request's context to oslo.log's formatters (which read ``record.context``),
    unless the call gave one of its own. Outside a request a line names none: oslo.log
    would otherwise take whatever context a library left in oslo.context's thread-local
    store (the embedded Placement leaves each of its requests' in the thread that called
    it, such as the Placement sync's), and show a finished request's id."""

    def filter(self, record: logging.LogRecord) -> bool:
        if "context" not in record.__dict__:
            record.context = _CURRENT.get()
        return True


CONTEXT_FILTER = ContextFilter()


_ABSENT = object()
# Set on every text line; '' unless something else set them (oslo.log's rule).
_BLANK_UNLESS_SET = ("color", "user_identity", "resource", "user_name", "project_name",
                     "global_request_id")  # fmt: skip


class Formatter(oslo_formatters.ContextFormatter):
    """oslo.log's text formatter, writing the same lines, cheaper for the lines of INFO
    that requests write (docs/benchmarks.md, "What the shortcuts save").

    oslo.log's builds a line from the configuration's format strings, read afresh, a
    format object made afresh, the ISO time (``%(isotime)s``) computed whether the format
    names it or not, the caller's identity filled afresh, and every context value copied
    twice. This one reads the format strings once (oslo.log does not change them at a
    reload), keeps a format object for each, fills the identity once a request
    (``LogContext.identity``) and the ISO time only when a format names it. A line it
    has no quick way for (an exception, DEBUG's suffix, WARNING's error summary, an
    instance, another kind of context) goes to oslo.log's own way."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._context_format: str = self.conf.logging_context_format_string
        self._default_format: str = self.conf.logging_default_format_string
        self._identity_format: str = self.conf.logging_user_identity_format
        self._styles: dict[str, logging.PercentStyle] = {}

    def format(self, record: logging.LogRecord) -> str:
        fields = record.__dict__
        context = fields.get("context", _ABSENT)
        if context is not None and type(context) is not LogContext:
            return super().format(record)  # none handed, or another kind
        if (
            not logging.DEBUG < record.levelno < logging.WARNING
            or record.exc_info
            or fields.get("instance")
            or fields.get("instance_uuid")
            or (context is not None and context.resource_uuid)
        ):
            return super().format(record)
        fields["project"], fields["version"] = self.project, self.version
        if context is not None:
            fields.update(context.kept_values())
        fields["instance"] = ""
        for key in _BLANK_UNLESS_SET:
            fields.setdefault(key, "")
        if context is not None:
            fields["user_identity"] = context.identity(self._identity_format)
        form = self._context_format if fields.get("request_id") else self._default_format
        fields["error_summary"] = "-" if "%(error_summary)s" in form else ""
        if "%(isotime)" in form:
            self._compute_iso_time(record)
        style = self._styles.get(form)
        if style is None:
            style = self._styles[form] = logging.PercentStyle(form)
        self._style, self._fmt = style, style._fmt
        try:
            return logging.Formatter.format(self, record)
        except TypeError:  # oslo.log's own says what went wrong in the line
            return super().format(record)

    @classmethod
    def replacing(cls, formatter: logging.Formatter | None) -> logging.Formatter | None:
        """This formatter in place of ``formatter`` when that is oslo.log's text one, as
        configured; any other as it is."""
        if type(formatter) is not oslo_formatters.ContextFormatter:
            return formatter
        return cls(
            project=formatter.project,
            version=formatter.version,
            datefmt=formatter.datefmt,
            config=formatter.conf,
        )


class _CurrentStderr:
    """Standard error as ``sys.stderr`` is at each write, not as it was at the setup: a
    server thread that outlives whoever replaced it (a test's capture, closed since)
    still logs."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


STDERR = _CurrentStderr()


def _warn_unknown(conf: cfg.ConfigOpts) -> None:
    """A warning for each option or section of the configuration files that nothing
    reads (a misspelt name is otherwise ignored in silence), once logging is set up."""
    from acceleron import conf as confmod

    try:
        unknown = confmod.unknown_options(conf.config_file)
    except Exception:  # the files were read already: whatever this is, it is no reason to stop
        logging.getLogger("acceleron.conf").debug("Not checked for unknown options", exc_info=True)
        return
    for name in unknown:
        logging.getLogger("acceleron.conf").warning(
            "%s in %s: no such option or section; ignored (misspelt?)",
            name,
            ", ".join(conf.config_file),
        )


class ServerLines(logging.Filter):
    """uvicorn's lines about the server itself (started, listening, stopping: logger
    ``uvicorn.error``, whatever their level) under Acceleron's name, ``acceleron.server``:
    a start-up line is not an error."""

    NAME = "acceleron.server"

    def filter(self, record: logging.LogRecord) -> bool:
        record.name = self.NAME
        return True


SERVER_LINES = ServerLines()


class LoggingUnavailable(Exception):
    """Logging cannot be set up as the configuration says (the message says why)."""


def setup(conf: cfg.ConfigOpts, program: str, warn_unknown: bool = True) -> None:
    """Set up logging as the configuration says; for the processes that serve (the API,
    the agent, the all-in-one). Raises LoggingUnavailable, saying why, when it cannot.

    ``program`` (``acceleron-api``) names the file ``log_dir`` alone writes to,
    ``<log_dir>/<program>.log``: oslo.log would name it after the running script, which
    is ``acceleron`` for every command (an API and an agent on one host would share a
    file) and ``<string>`` in the API's worker processes."""
    if conf.log_dir and not conf.log_file:
        conf.set_default("log_file", f"{program}.log")
    try:
        oslo_log.setup(conf, "acceleron", acceleron.__version__)
    except OSError as error:  # the log file or its directory
        raise LoggingUnavailable(
            f"Cannot log to {error.filename or conf.log_file}: {error.strerror or error}."
        ) from error
    except RuntimeError as error:
        if conf.use_journal and "ystemd" in str(error):
            raise LoggingUnavailable(
                "use_journal = true needs systemd's Python bindings, which are not installed "
                "where Acceleron runs: pip install systemd-python (it builds against "
                "libsystemd-dev), or log to standard error, which systemd also sends to "
                "the journal."
            ) from error
        raise LoggingUnavailable(f"Cannot set logging up: {error}") from error
    server = logging.getLogger("uvicorn.error")
    if SERVER_LINES not in server.filters:
        server.addFilter(SERVER_LINES)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in (
            sys.stdout,
            sys.stderr,
        ):  # oslo.log's fallback, when nothing else is set: standard error, as it is now
            handler.setStream(STDERR)
        if CONTEXT_FILTER not in handler.filters:
            handler.addFilter(CONTEXT_FILTER)
        handler.setFormatter(Formatter.replacing(handler.formatter))
    if warn_unknown:  # once the handlers are as above (outside any request: "[-]")
        _warn_unknown(conf)


def elsewhere(
    level: int, message: str, name: str = "acceleron", skip: tuple[object, ...] = ()
) -> None:
    """``message`` written by every handler of the log that does not write to standard
    error (or to a stream in ``skip``): what a command printed there (a refused start)
    also in the log file, the journal or syslog, and not twice on the terminal."""
    logger = logging.getLogger(name)
    if not logger.isEnabledFor(level):
        return
    record = logger.makeRecord(name, level, "(command)", 0, message, (), None)
    streams = (STDERR, sys.stderr, sys.__stderr__, *skip)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler) and handler.stream in streams:
            continue
        if record.levelno >= handler.level:
            handler.handle(record)
