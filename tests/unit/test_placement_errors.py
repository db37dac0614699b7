"""Placement's error answers as Acceleron words them: its message without webob's
boilerplate, and an unknown trait or class named."""

from __future__ import annotations

import io
import json

import requests

from acceleron.placement.client import _UNKNOWN_NAME, _error_detail

WEBOB = (
    "The server could not comply with the request since it is either malformed or "
    "otherwise incorrect.\n\n No such trait(s): CUSTOM_XYZ, CUSTOM_B.  "
)


def answer(status: int, body: object) -> requests.Response:
    response = requests.Response()
    response.status_code = status
    response.raw = io.BytesIO(json.dumps(body).encode() if not isinstance(body, bytes) else body)
    return response


def test_the_message_without_the_boilerplate() -> None:
    body = {"errors": [{"status": 400, "detail": WEBOB, "code": "placement.undefined_code"}]}
    assert _error_detail(answer(400, body)) == (
        "No such trait(s): CUSTOM_XYZ, CUSTOM_B.",
        "placement.undefined_code",
    )
    plain = {"errors": [{"status": 409, "detail": "Inventory in use.", "code": "x"}]}
    assert _error_detail(answer(409, plain)) == ("Inventory in use.", "x")
    assert _error_detail(answer(502, b"  <html>\n bad gateway\n</html> ")) == (
        "<html> bad gateway </html>",
        None,
    )


def test_the_unknown_names_are_found() -> None:
    found = _UNKNOWN_NAME.search(WEBOB)
    assert found is not None and (found["what"], found["names"]) == (
        "trait(s)",
        "CUSTOM_XYZ, CUSTOM_B",
    )
    found = _UNKNOWN_NAME.search("No such resource class CUSTOM_NOPE.")
    assert found is not None and found["names"] == "CUSTOM_NOPE"
