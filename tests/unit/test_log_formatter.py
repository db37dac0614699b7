"""The text formatter (``acceleron.logs.Formatter``) writes every line as oslo.log's own
``ContextFormatter`` writes it, for any format strings: the quick way and the lines it
hands to oslo.log's."""

from __future__ import annotations

import copy
import logging
import re
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from oslo_config import cfg
from oslo_context import context as oslo_context
from oslo_log import formatters as oslo_formatters
from oslo_log import log as oslo_log

from acceleron import logs
from acceleron.context import RequestContext

EVERY_FIELD = (
    "%(isotime)s %(asctime)s.%(msecs)03d %(process)d %(levelname)s %(name)s %(project)s "
    "%(version)s [%(global_request_id)s %(request_id)s %(user_identity)s] %(user)s "
    "%(project_id)s %(user_name)s %(project_name)s %(roles)s %(color)s "
    "%(resource)s %(error_summary)s %(instance)s%(message)s"
)
FORMATS = [
    {},  # oslo.log's defaults
    {
        "logging_context_format_string": EVERY_FIELD,
        "logging_default_format_string": "%(isotime)s %(asctime)s %(project)s %(version)s "
        "%(error_summary)s [%(user_identity)s %(user_name)s %(color)s] %(instance)s%(message)s",
        "logging_user_identity_format": "%(user)s/%(project)s/%(user_name)s/%(nothing)s",
        "logging_debug_format_suffix": "",
    },
]


@pytest.fixture(params=range(len(FORMATS)), ids=["defaults", "every-field"])
def conf(request: pytest.FixtureRequest) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    oslo_log.register_options(conf)
    conf([], project="acceleron")
    for name, value in FORMATS[request.param].items():
        conf.set_override(name, value)
    return conf


def request_context(named: bool, global_id: str | None = None) -> logs.LogContext:
    token = logs.begin("req-5b4bb4a3-8e0c-4c39-9d62-3f5bbf1d2a11", global_id)
    try:
        found = logs.current()
        assert found is not None
        if named:
            logs.identify(
                RequestContext(
                    request_id="r", user_id="u1", project_id="p1", roles=frozenset({"member"})
                )
            )
        return found
    finally:
        logs.end(token)


def records() -> Iterator[tuple[str, logging.LogRecord]]:
    def record(
        level: int = logging.INFO,
        msg: str = "created %s (%d)",
        args: tuple[Any, ...] = ("dp1", 3),
        **fields: Any,
    ) -> logging.LogRecord:
        made = logging.LogRecord("acceleron.x", level, __file__, 7, msg, args, None)
        made.created = 1_764_000_000.0 if fields.pop("whole_second", False) else made.created
        made.__dict__.update(fields)
        return made

    yield "no context handed", record()
    yield "outside a request", record(context=None)
    yield "a request, caller unknown", record(context=request_context(False))
    yield "a request, caller named", record(context=request_context(True))
    yield (
        "another service's request id",
        record(context=request_context(True, "req-0f8fad5b-d9cb-469f-a165-70867728950e")),
    )
    yield "a whole second", record(context=request_context(True), whole_second=True)
    yield (
        "oslo.context's own context",
        record(
            context=oslo_context.RequestContext(user_id="u2", project_id="p2", request_id="req-x")
        ),
    )
    as_dict = oslo_context.RequestContext(user_id="u3", request_id="req-y").get_logging_values()
    yield "a dict for context", record(context=as_dict)
    yield (
        "a context with a resource",
        record(context=oslo_context.RequestContext(resource_uuid="r1", request_id="req-z")),
    )
    yield "an instance", record(context=request_context(True), instance={"uuid": "i1"})
    yield "an instance uuid", record(context=None, instance_uuid="i2")
    yield "DEBUG", record(logging.DEBUG, context=request_context(True))
    yield "WARNING", record(logging.WARNING, context=request_context(True))
    try:
        raise ValueError("broken")
    except ValueError:
        yield "an exception", record(logging.ERROR, context=None, exc_info=sys.exc_info())
    yield "arguments that do not fit", record(msg="%d things", args=("many",), context=None)
    yield "a stack", record(context=None, stack_info="Stack (most recent call last):\n  here")


@pytest.mark.parametrize("case", [name for name, _ in records()])
def test_a_line_is_oslo_logs_line(conf: cfg.ConfigOpts, case: str) -> None:
    made = dict(records())[case]
    oslo = oslo_formatters.ContextFormatter(project="acceleron", version="1.0", config=conf)
    ours = logs.Formatter.replacing(oslo)
    assert type(ours) is logs.Formatter
    try:
        expected = oslo.format(copy.copy(made))
    except TypeError as error:  # what oslo.log's raises, ours raises
        with pytest.raises(type(error), match=re.escape(str(error))):
            ours.format(copy.copy(made))
        return
    again = copy.copy(made)
    assert ours.format(again) == expected
    assert ours.format(again) == expected  # a record a second handler formats again


def test_only_oslo_logs_text_formatter_is_replaced(conf: cfg.ConfigOpts) -> None:
    json = oslo_formatters.JSONFormatter()
    assert logs.Formatter.replacing(json) is json
    assert logs.Formatter.replacing(None) is None
