"""The API's one client (acceleron.client.http) when no answer comes: a closed port, an
API that accepts and never answers, a catalog without the service. Its answers from a
live API are in tests/functional/test_api_client.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from keystoneauth1 import adapter, session, token_endpoint

from acceleron.client.http import (
    DEFAULT_TIMEOUT,
    AcceleronClient,
    NoEndpoint,
    Unreachable,
)


@pytest.fixture
def silent() -> Iterator[str]:
    """The URL of a socket that takes connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_a_closed_port_is_unreachable_with_its_address_and_reason() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    client = AcceleronClient.connect(f"{url}/v2/")
    assert client.url == url
    with pytest.raises(Unreachable) as raised:
        client.send("GET", "/v2/device_profiles")
    assert raised.value.url == f"{url}/v2/device_profiles"
    assert raised.value.reason == "Connection refused"
    assert str(raised.value) == f"cannot reach {url}/v2/device_profiles: Connection refused"


def test_every_call_has_a_timeout(silent: str) -> None:
    assert AcceleronClient.connect(silent).timeout == DEFAULT_TIMEOUT
    timed = AcceleronClient(adapter.Adapter(session.Session(timeout=7), endpoint_override=silent))
    assert timed.timeout == 7
    with pytest.raises(Unreachable, match="timed out"):
        AcceleronClient.connect(silent, timeout=0.2).send("GET", "/v2")
    with pytest.raises(Unreachable, match="timed out"):
        AcceleronClient.connect(silent).send("GET", "/v2", timeout=0.2)


def test_a_catalog_without_the_service_is_no_endpoint() -> None:
    sess = session.Session(auth=token_endpoint.Token(None, "token"))
    client = AcceleronClient(adapter.Adapter(sess, service_type="accelerator"))
    assert client.url is None and client.where == "the catalog's accelerator API"
    assert not client.noauth
    with pytest.raises(NoEndpoint, match="no 'accelerator' endpoint"):
        client.send("GET", "/v2")
