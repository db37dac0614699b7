"""``FailFast``: a collection whose validation stops at its first bad item.

pydantic validates every item of a list or mapping and keeps each error: a request body
of 50,000 wrong items (they fit in ``[oslo_middleware] max_request_body_size``) would
cost 50,000 errors, with the GIL held and the event loop stalled. Every collection of a
body the API takes is annotated ``Annotated[list[X], FailFast]``: pydantic then stops
at the first error of each (``tests/unit/test_fail_fast.py`` walks every route's body
and finds none that does not).

This does what pydantic's own ``FailFast()`` does, without importing pydantic: the
types of a host report (``vocabulary``) are the drivers' and the CLI's too, which do
not import it.
"""

from __future__ import annotations

from typing import Any

_COLLECTIONS = ("list", "tuple", "set", "frozenset", "dict")


class _FailFast:
    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        """The collection's schema (with what else annotates it), stopping at its first
        error: what pydantic's ``FailFast()`` sets."""
        schema = handler(source)
        if schema.get("type") not in _COLLECTIONS:
            raise TypeError(f"FailFast annotates a list, tuple, set or mapping, not {source}")
        return {**schema, "fail_fast": True}

    def __repr__(self) -> str:
        return "FailFast"


FailFast = _FailFast()
