"""The in-process transport to the embedded Placement takes nothing from the
environment: no proxy, no ~/.netrc (each request would read them, and stat the file).
A remote Placement's session reads it once a destination."""

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


def test_a_remote_placement_s_session_reads_the_environment_once_a_destination(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What requests reads of the environment for a call (proxies, ``no_proxy``, a CA
    bundle), read once for each destination: the same as requests' own answer."""
    from requests import Session

    from acceleron.service.placement import EnvironmentOnce

    monkeypatch.setenv("HTTP_PROXY", "http://proxy.example:3128")
    monkeypatch.setenv("NO_PROXY", "placement.example")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/ours.pem")
    once, plain = EnvironmentOnce(), Session()
    for url in ("http://placement.example/resource_providers", "http://other.example/x"):
        for verify in (True, False):
            mine = once.merge_environment_settings(url, {}, None, verify, None)
            assert mine == plain.merge_environment_settings(url, {}, None, verify, None)
    bypassed = once.merge_environment_settings("http://placement.example/a", {}, None, True, None)
    assert bypassed["proxies"] == {} and bypassed["verify"] == "/etc/ssl/ours.pem"
    monkeypatch.setenv("HTTP_PROXY", "http://elsewhere.example:8080")  # read already
    again = once.merge_environment_settings("http://other.example/y", {}, None, True, None)
    assert again["proxies"]["http"] == "http://proxy.example:3128"
    new = once.merge_environment_settings("http://third.example/", {}, None, True, None)
    assert new["proxies"]["http"] == "http://elsewhere.example:8080"  # a new destination
