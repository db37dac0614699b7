"""The API client: how answers become exceptions, and how the connection is configured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oslo_config import cfg

from acceleron import conf as confmod
from acceleron.agent.client import (
    ApiUnavailable,
    ReportRefused,
    UnknownHost,
    connect,
    error_for,
    unknown_host_message,
)
from acceleron.client.errors import parse_error
from acceleron.client.http import OptionsError
from acceleron.connection import base_url


def api_error(status: int, code: str, detail: str) -> str:
    """An error body as the API writes it."""
    fault = json.dumps({"faultstring": detail, "faultcode": "Client", "debuginfo": None})
    item = {"status": status, "code": code, "title": "t", "detail": detail, "request_id": "r"}
    return json.dumps({"error_message": fault, "errors": [item]})


def test_unknown_host_is_its_own_error() -> None:
    detail = "No compute node is named 'node1'; did you mean 'node1.example.org'?"
    error = error_for("node1", 409, api_error(409, "acceleron.unknown_host", detail))
    assert isinstance(error, UnknownHost)
    assert error.hostname == "node1" and error.detail == detail
    message = unknown_host_message(error)
    assert detail in message
    assert "[DEFAULT] host" in message and "'node1'" in message
    assert "\n" not in message  # one paragraph


def test_another_conflict_is_a_refusal() -> None:
    error = error_for("h", 409, api_error(409, "acceleron.conflict", "busy"))
    assert type(error) is ReportRefused
    assert str(error) == "the API refused the report (409): busy"


def test_an_invalid_report_is_refused_with_the_apis_message() -> None:
    error = error_for("h", 400, api_error(400, "acceleron.invalid_input", "devices.0: bad type"))
    assert type(error) is ReportRefused and error.status == 400
    assert "devices.0: bad type" in str(error)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429])
def test_server_errors_and_throttling_mean_retry_later(status: int) -> None:
    error = error_for("h", status, "<html>Bad Gateway</html>")
    assert isinstance(error, ApiUnavailable)
    assert f"the API answered {status}: <html>Bad Gateway</html>" == str(error)


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failures_say_which_role_the_agent_needs(status: int) -> None:
    error = error_for("h", status, api_error(status, "acceleron.forbidden", "Policy refuses"))
    assert type(error) is ReportRefused
    assert "'service' (or 'admin') role" in str(error)


def test_bodies_that_are_not_the_apis_are_shown_as_they_are() -> None:
    assert parse_error("", "Not Found").detail == "Not Found"
    assert parse_error('{"detail": "x"}').detail == '{"detail": "x"}'
    assert parse_error("oops").code is None


@pytest.mark.parametrize(
    ("endpoint", "base"),
    [
        ("http://ctl:6666", "http://ctl:6666"),
        ("http://ctl:6666/", "http://ctl:6666"),
        ("https://ctl/accelerator/v2", "https://ctl/accelerator"),
        ("https://ctl/accelerator/v2/", "https://ctl/accelerator"),
    ],
)
def test_the_api_root_from_a_catalog_endpoint(endpoint: str, base: str) -> None:
    assert base_url(endpoint) == base


def test_noauth_sends_no_token_to_the_embedded_api_by_default(conf: cfg.ConfigOpts) -> None:
    client = connect(conf)
    assert client.where == "http://127.0.0.1:6666"
    assert client.api.configured_adapter.auth is None
    assert client.api.configured_adapter.service_type == "accelerator"
    assert client.api.configured_adapter.default_microversion == "2.5"


def test_api_endpoint_wins(conf: cfg.ConfigOpts) -> None:
    conf.set_override("api_endpoint", "https://acc.example.org:6666", group="agent")
    conf.set_override("endpoint_override", "http://ignored", group="agent")
    assert connect(conf).where == "https://acc.example.org:6666"


def keystone(tmp_path: Path, **options: str) -> cfg.ConfigOpts:
    """A configuration read from a file whose [agent] section uses the password plugin."""
    path = tmp_path / "acceleron.conf"
    lines = ["[agent]", "auth_type = password", *(f"{k} = {v}" for k, v in options.items())]
    path.write_text("\n".join(lines) + "\n")
    return confmod.load([], config_files=[str(path)])


def test_keystone_mode_finds_the_api_in_the_catalog(tmp_path: Path) -> None:
    conf = keystone(
        tmp_path,
        auth_url="http://keystone:5000/v3",
        username="acceleron",
        password="secret",
        project_name="service",
    )
    client = connect(conf)
    assert client.api.configured_adapter.auth is not None
    assert client.api.configured_adapter.endpoint_override is None
    assert client.api.configured_adapter.interface == ["internal", "public"]
    assert client.where == "the catalog's accelerator API"


def test_a_missing_auth_option_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(OptionsError, match="were not given: auth_url"):
        connect(keystone(tmp_path, username="acceleron"))


def test_auth_section_reuses_another_sections_credentials(tmp_path: Path) -> None:
    path = tmp_path / "acceleron.conf"
    path.write_text(
        "[agent]\nauth_section = keystone_authtoken\n"
        "[keystone_authtoken]\nauth_type = password\nauth_url = http://keystone:5000/v3\n"
        "username = acceleron\npassword = secret\nproject_name = service\n"
    )
    client = connect(confmod.load([], config_files=[str(path)]))
    assert type(client.api.configured_adapter.auth).__name__ == "Password"
    assert client.where == "the catalog's accelerator API"
