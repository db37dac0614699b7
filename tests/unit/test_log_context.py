"""A request's logging context (``acceleron.logs``): what each line of it carries."""

from __future__ import annotations

from acceleron import logs
from acceleron.api.middleware import new_request_id
from acceleron.context import RequestContext


def test_lines_name_the_caller_from_when_authentication_named_it() -> None:
    """oslo.log asks for the context's values twice a line; they are kept, and forgotten
    when the caller becomes known mid-request."""
    request_id = new_request_id()
    token = logs.begin(request_id)
    try:
        found = logs.current()
        assert found is not None
        before = found.get_logging_values()
        assert (before["request_id"], before["user"], before["project_id"]) == (
            request_id,
            None,
            None,
        )
        before["user"] = "changed by a caller"  # a copy: what is kept stays as it was
        assert found.get_logging_values()["user"] is None
        logs.identify(
            RequestContext(
                request_id=request_id,
                user_id="u1",
                project_id="p1",
                roles=frozenset({"reader", "member"}),
            )
        )
        after = found.get_logging_values()
    finally:
        logs.end(token)
    assert (after["user"], after["project_id"], after["roles"]) == (
        "u1",
        "p1",
        ["member", "reader"],
    )
