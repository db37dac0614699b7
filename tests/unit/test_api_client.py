"""The API's one client (acceleron.client.http) when no answer comes: a closed port, an
API that accepts and never answers, a catalog without the service. Its answers from a
live API are in tests/functional/test_api_client.py."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest
from keystoneauth1 import adapter, session, token_endpoint

from acceleron.client import plain
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


def test_without_keystone_the_standard_library_carries_the_calls() -> None:
    """A noauth client loads neither keystoneauth nor requests (a CLI command's start-up)."""
    code = (
        "import sys; from acceleron.client.http import AcceleronClient; "
        "c = AcceleronClient.connect('http://127.0.0.1:1/v2', microversion='2.14'); "
        "assert c.noauth and c.url == 'http://127.0.0.1:1'; "
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in "
        "('requests', 'keystoneauth1', 'urllib3')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == ""


@pytest.mark.parametrize(
    ("given", "params", "query"),
    [
        ("", None, ""),
        ("", {"name": "a,b", "limit": 2, "skip": None}, "?name=a%2Cb&limit=2"),
        ("x=1", {"y": ["p", "q"]}, "?x=1&y=p&y=q"),
    ],
)
def test_a_plain_query_string_as_requests_makes_it(
    given: str, params: dict[str, object] | None, query: str
) -> None:
    assert plain._query(given, params) == query
