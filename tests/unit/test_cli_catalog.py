"""The CLI's API root from a Keystone catalog whose accelerator endpoint ends in /v2 (as
the reference cloud's and most clouds' do): the commands' /v2/... paths are not doubled."""

from __future__ import annotations

import argparse

import pytest

from acceleron.cli.client import ApiClient, CommandError


def client(endpoint: str, url: str | None = None) -> ApiClient:
    """A client whose auth plugin answers ``endpoint`` for the accelerator service, as a
    catalog would (keystoneauth's admin_token plugin: no Keystone needed)."""
    options = argparse.Namespace(
        os_auth_type="admin_token",
        os_endpoint=endpoint,
        os_token="t",
        os_url=url,
        os_accelerator_api_version="2.14",
        insecure=False,
    )
    return ApiClient(options)


def test_the_catalog_endpoint_loses_its_v2() -> None:
    found = client("http://192.0.2.7:6666/v2/")
    assert found.url is None  # not asked before the first request
    assert found.adapter.endpoint_override == "http://192.0.2.7:6666"
    assert found.url == "http://192.0.2.7:6666"


def test_a_given_url_wins() -> None:
    found = client("http://192.0.2.7:6666/v2", url="http://198.51.100.1/v2")
    assert found.adapter.endpoint_override == "http://198.51.100.1"


def test_a_catalog_without_the_api_is_one_line() -> None:
    options = argparse.Namespace(
        os_auth_type="admin_token",
        os_endpoint=None,
        os_token="t",
        os_url=None,
        os_accelerator_api_version="2.14",
        insecure=False,
    )
    with pytest.raises(CommandError, match=r"no accelerator endpoint: give the API's URL \(--os"):
        ApiClient(options).get("/v2/device_profiles")
