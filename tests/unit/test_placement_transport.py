"""The in-process transport to the embedded Placement takes nothing from the
environment: no proxy, no ~/.netrc (each request would read them, and stat the file)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from acceleron.placement import inprocess


def echo(environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
    start("200 OK", [("Content-Type", "text/plain")])
    return [environ.get("HTTP_AUTHORIZATION", "none").encode()]


def test_a_netrc_entry_for_the_endpoint_is_not_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    netrc = tmp_path / "netrc"
    netrc.write_text("machine placement.in-process login someone password secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    answer = inprocess.direct_adapter(echo).get("/resource_providers")
    assert (answer.status_code, answer.text) == (200, "none")
