"""The Nova weigher's look-ups (acceleron.scheduler.functions) against a live API: which
functions a flavor wants, resolved as the claim flow resolves them, and which hosts hold
them; any failure weighs every host 0 and is logged, never raised.

The Nova class itself (acceleron.scheduler.nova_weigher) needs Nova installed: the
end-to-end suite runs it inside nova-scheduler with two hosts (tests/e2e)."""

from __future__ import annotations

import logging
import socket
import uuid
from collections.abc import Callable

import pytest
from keystoneauth1 import adapter, session
from keystoneauth1.noauth import NoAuth
from oslo_config import cfg

from acceleron.drivers import gbs
from acceleron.scheduler import functions
from tests.fixtures.host import Host, call, profile

GZIP = "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
REGION_TYPE = "ce48969398f05f33946d560708be108a"
FPGA = "resources:CUSTOM_ACCELERATOR_FPGA"


def inventory(*functions_held: str) -> str:
    held = ", ".join(uuid.UUID(f).hex for f in functions_held)
    return f"""
devices:
  - type: FPGA
    product_id: "09c4"
    model: PAC_ARRIA10
    regions:
      - region_type: {REGION_TYPE}
        accelerators: 1
        functions: [{held}]
"""


@pytest.fixture(scope="module")
def hosts(live_api: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """Two hosts with the same FPGA: the first one's region holds GZIP."""
    holding = Host(live_api, tmp_path_factory.mktemp("holding"), inventory(GZIP))
    other = Host(live_api, tmp_path_factory.mktemp("other"), inventory())
    holding.report()
    other.report()
    return holding.name, other.name


def connector(url: str) -> Callable[[], adapter.Adapter]:
    def connect() -> adapter.Adapter:
        return adapter.Adapter(
            session.Session(auth=NoAuth()), service_type="accelerator", endpoint_override=url
        )

    return connect


def weights(url: str, extra_specs: dict[str, str], *names: str) -> list[float]:
    return functions.weigh_hosts(connector(url), extra_specs, list(names))


def test_the_host_holding_the_function_weighs_1(live_api: str, hosts: tuple[str, str]) -> None:
    name = profile(live_api, [{FPGA: "1", "accel:function_id": GZIP}])
    specs = {"accel:device_profile": name}
    assert weights(live_api, specs, *hosts, "unknown-host") == [1.0, 0.0, 0.0]


def test_function_names_and_bitstreams_are_resolved_in_the_catalogue(
    live_api: str, hosts: tuple[str, str]
) -> None:
    bitstream = bitstream_of(live_api, GZIP, function_name="gzip-weigh")
    for key, value in (
        ("accel:function_name", "gzip-weigh"),
        ("accel:bitstream_id", bitstream),
        ("accel:bitstream_name", "gzip-weigh.gbs"),
    ):
        name = profile(live_api, [{FPGA: "1", key: value}])
        specs = {"accel:device_profile": name}
        assert weights(live_api, specs, *hosts) == [1.0, 0.0], key


def test_spec_001_inline_extra_specs(live_api: str, hosts: tuple[str, str]) -> None:
    trait = f"CUSTOM_FPGA_INTEL_FUNCTION_{uuid.UUID(GZIP).hex.upper()}"
    specs = {"resources1:CUSTOM_ACCELERATOR_FPGA": "1", f"function1:{trait}": "required"}
    assert weights(live_api, specs, *hosts) == [1.0, 0.0]


def test_a_flavor_that_wants_no_function_asks_nothing(
    live_api: str, hosts: tuple[str, str]
) -> None:
    def refuse() -> adapter.Adapter:
        raise AssertionError("the API was asked")

    assert functions.weigh_hosts(refuse, {"hw:cpu_policy": "dedicated"}, list(hosts)) == [0, 0]
    plain = profile(live_api, [{FPGA: "1"}])  # a profile naming no function
    assert weights(live_api, {"accel:device_profile": plain}, *hosts) == [0.0, 0.0]


def test_failures_weigh_every_host_0_and_are_logged(
    live_api: str, hosts: tuple[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="acceleron.scheduler.functions")
    assert weights(live_api, {"accel:device_profile": "no-such-profile"}, *hosts) == [0, 0]
    assert "device profile 'no-such-profile': 0 found" in caplog.text
    caplog.clear()
    name = profile(live_api, [{FPGA: "1", "accel:function_id": GZIP}])
    assert weights(closed_port_url(), {"accel:device_profile": name}, *hosts) == [0, 0]
    assert "every host weighs 0" in caplog.text


def test_an_unreachable_api_is_looked_up_again(live_api: str, hosts: tuple[str, str]) -> None:
    """The endpoint found in the catalog moved (another accelerator service adopted, say):
    the request that cannot reach it weighs 0 and forgets it; the next one looks again."""
    urls = [closed_port_url(), live_api]
    forgotten: list[bool] = []

    def connect() -> adapter.Adapter:
        return connector(urls[0])()

    def forget() -> None:
        forgotten.append(True)
        urls.pop(0)

    specs = {"accel:device_profile": profile(live_api, [{FPGA: "1", "accel:function_id": GZIP}])}
    assert functions.weigh_hosts(connect, specs, list(hosts), forget) == [0.0, 0.0]
    assert forgotten == [True]
    assert functions.weigh_hosts(connect, specs, list(hosts), forget) == [1.0, 0.0]
    assert forgotten == [True]


def test_the_weigher_reads_its_own_config_section(live_api: str, hosts: tuple[str, str]) -> None:
    conf = cfg.ConfigOpts()
    functions.register_opts(conf)
    functions.register_opts(conf)  # Nova may load the weigher more than once
    conf([], default_config_files=[])
    assert conf.acceleron_weigher.weight_multiplier == 1.0
    with pytest.raises(LookupError, match="neither auth_type nor endpoint_override"):
        functions.load_adapter(conf)
    # Without Keystone (an all-in-one): the endpoint alone; a catalog-style /v2 is dropped.
    conf.set_override("endpoint_override", f"{live_api}/v2", "acceleron_weigher")
    api = functions.load_adapter(conf)
    name = profile(live_api, [{FPGA: "1", "accel:function_id": GZIP}])
    specs = {"accel:device_profile": name}
    assert functions.weigh_hosts(lambda: api, specs, list(hosts)) == [1.0, 0.0]


def bitstream_of(url: str, function: str, function_name: str) -> str:
    meta = {
        "name": f"{function_name}.gbs",
        "function_uuid": function,
        "function_name": function_name,
        "region_type_uuid": REGION_TYPE,
    }
    created = call(url, "POST", "/v2/bitstreams", json=meta)
    assert created.status_code == 201, created.text
    data = gbs.build(REGION_TYPE, (function,), payload=b"\x5a" * 1000)
    put = call(
        url,
        "PUT",
        f"/v2/bitstreams/{created.json()['uuid']}/data",
        data=data,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    bitstream_id: str = created.json()["uuid"]
    return bitstream_id


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
