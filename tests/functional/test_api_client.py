"""The API's one client (acceleron.client.http) against a live API: the root without
/v2, the microversion asked for, error answers as ApiError."""

from __future__ import annotations

import uuid

import pytest

from acceleron.client.http import AcceleronClient, ApiError

VERSION_HEADER = "OpenStack-API-Version"


def test_the_microversion_is_the_clients_unless_the_call_says(live_api: str) -> None:
    client = AcceleronClient.connect(f"{live_api}/v2", microversion="2.4")
    assert client.url == live_api and client.noauth
    assert client.send("GET", "/v2/device_profiles").headers[VERSION_HEADER] == "accelerator 2.4"
    answer = client.send("GET", "/v2/device_profiles", microversion="2.1")
    assert answer.headers[VERSION_HEADER] == "accelerator 2.1"
    assert client.call("GET", "/v2/device_profiles") == {"device_profiles": []}


def test_an_error_answer_is_an_api_error(live_api: str) -> None:
    client = AcceleronClient.connect(live_api)
    missing = str(uuid.uuid4())
    with pytest.raises(ApiError) as raised:
        client.call("GET", f"/v2/device_profiles/{missing}")
    assert raised.value.status == 404
    assert raised.value.code == "acceleron.not_found"
    assert missing in raised.value.detail
    assert str(raised.value) == f"404 {raised.value.detail}"
    assert client.call("DELETE", "/v2/accelerator_requests", params={"instance": missing}) is None
