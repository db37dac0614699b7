"""Accelerator requests as Nova drives them, for the clients that do the same (the
scheduler's claims, os_acc): creating them, binding them, and waiting until the binds
end. ``call(method, path, **kwargs)`` sends a request (the caller's wrapper of
:meth:`acceleron.client.http.AcceleronClient.send`); ``error`` is the caller's exception."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from acceleron.client.errors import detail

Progress = Callable[[Sequence[Mapping[str, Any]]], None]
Call = Callable[..., Any]
PATH = "/v2/accelerator_requests"


def create(call: Call, profile: str, error: type[Exception], doing: str) -> list[dict[str, Any]]:
    """The requests ``profile`` makes; ``error`` "<doing>: <why>" when refused."""
    response = call("POST", PATH, json={"device_profile_name": profile})
    if response.status_code != 201:
        raise error(f"{doing}: {detail(response)}")
    arqs: list[dict[str, Any]] = response.json()["arqs"]
    return arqs


def bind(call: Call, body: Mapping[str, Any], error: type[Exception], doing: str) -> None:
    """Send a bind PATCH (``bind_body``'s); ``error`` "<doing>: <why>" when refused."""
    response = call("PATCH", PATH, json=body)
    if response.status_code != 202:
        raise error(f"{doing}: {detail(response)}")


def bind_body(
    arqs: Sequence[Mapping[str, Any]],
    providers: Mapping[int, str],
    hostname: str,
    instance: str,
    project: str | None = None,
) -> dict[str, list[dict[str, str]]]:
    """Nova's bind PATCH for ``arqs``: each to its group's provider on ``hostname``."""
    body = {}
    for arq in arqs:
        ops = [
            {"op": "add", "path": "/hostname", "value": hostname},
            {"op": "add", "path": "/device_rp_uuid",
             "value": providers[arq["device_profile_group_id"]]},
            {"op": "add", "path": "/instance_uuid", "value": instance},
        ]  # fmt: skip
        if project:
            ops.append({"op": "add", "path": "/project_id", "value": project})
        body[arq["uuid"]] = ops
    return body


def wait_resolved(
    call: Call,
    instance: str,
    timeout: float,
    poll: float,
    error: type[Exception],
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """The instance's requests once every bind has ended (the API answers 423 until
    then); ``error`` on a failure or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    params = {"instance": instance, "bind_state": "resolved"}
    while True:
        response = call("GET", PATH, params=params)
        if response.status_code == 200:
            arqs: list[dict[str, Any]] = response.json()["arqs"]
            return arqs
        if response.status_code != 423:
            raise error(f"Cannot follow the binds: {detail(response)}")
        if progress is not None:
            current = call("GET", PATH, params={"instance": instance})
            if current.status_code == 200:
                progress(current.json()["arqs"])
        if time.monotonic() >= deadline:
            raise error(f"The binds of {instance} did not end within {timeout:g} s.")
        time.sleep(poll)


def wait_claim(
    show: Callable[[], dict[str, Any]],
    claim: dict[str, Any],
    timeout: float,
    poll: float,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """A server-side claim (``POST /v2/claims``'s answer) followed with ``show()`` (its
    ``GET``) while it is ``binding``: the claim once bound or failed, or as it is when
    ``timeout`` seconds pass. ``progress`` sees its requests at each look."""
    deadline = time.monotonic() + timeout
    while claim["state"] == "binding":
        if progress is not None:
            progress(claim["accelerator_requests"])
        if time.monotonic() >= deadline:
            break
        time.sleep(poll)
        claim = show()
    return claim
