"""Following a server-side claim while it is binding (client.arqs.wait_claim)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from acceleron.client.arqs import wait_claim


def claim(state: str) -> dict[str, Any]:
    return {"state": state, "accelerator_requests": [{"state": state}]}


def test_a_binding_claim_is_followed_until_it_ends() -> None:
    answers = iter([claim("binding"), claim("bound")])
    seen: list[Sequence[Mapping[str, Any]]] = []
    ended = wait_claim(lambda: next(answers), claim("binding"), 10, 0, seen.append)
    assert ended["state"] == "bound" and len(seen) == 2


def test_a_claim_still_binding_at_the_timeout_is_returned_as_it_is() -> None:
    looks: list[int] = []

    def show() -> dict[str, Any]:
        looks.append(1)
        return claim("binding")

    assert wait_claim(show, claim("binding"), 0.05, 0.01)["state"] == "binding"
    assert 1 <= len(looks) <= 10


def test_an_ended_claim_is_not_looked_at_again() -> None:
    def show() -> dict[str, Any]:
        raise AssertionError("no look needed")

    assert wait_claim(show, claim("failed"), 10, 0)["state"] == "failed"
