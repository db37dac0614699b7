"""Every call of the standard OpenStack clients against a live Acceleron: no Acceleron
code on the client side.

* python-openstackclient's ``openstack accelerator ...`` commands (what the
  ``openstack`` CLI runs when python-cyborgclient is installed beside it), in-process
  through its shell, and once as its own process;
* python-cyborgclient's commands (the same names), driven over an openstacksdk proxy;
* every method of openstacksdk's accelerator proxy.

The target is a real ``acceleron all-in-one`` (API, agent with the fake driver,
embedded Placement) whose bitstream store is a real Glance (tests/fixtures/glance.py),
which the clients reach as their image service through an endpoint override, without
Keystone. Each test says which calls it makes (``covers``); one checks that every
command and proxy method is covered. ``openstack accelerator arq bind`` also looks the
server up in Nova, so its test needs a cloud with Nova.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import inspect
import io
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import openstack
import pytest
import requests
from cyborgclient.osc.v2 import accelerator_request as cc_arq
from cyborgclient.osc.v2 import attribute as cc_attribute
from cyborgclient.osc.v2 import deployable as cc_deployable
from cyborgclient.osc.v2 import device as cc_device
from cyborgclient.osc.v2 import device_profile as cc_dp
from openstack import exceptions as sdk_exc
from openstack.accelerator.v2 import _proxy
from openstackclient.shell import OpenStackShell

from acceleron.drivers import gbs
from tests.fixtures.allinone import LATEST, AllInOne, all_in_one
from tests.fixtures.glance import GlanceServer

pytest_plugins = ["tests.fixtures.glance"]
# The clients warn about their own deprecations (and the SDK's deprecated methods are
# among the calls tested).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
]

OPENSTACK = str(Path(sys.executable).parent / "openstack")
HOST = "aio-host"
GROUPS = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_PROGRAMMABLE": "required"}]
BIND_REGION = f"{HOST}_0000:38:00.0_region0"  # two accelerators: binds come and go here
PROGRAM_REGION = f"{HOST}_0000:39:00.0_region0"  # nothing binds it: programmed here
REGION0_TYPE = "ce48969398f05f33946d560708be108a"  # the fake inventory's region0 type
QAT = "0000:3c:00.0"
UNBIND = [
    {"op": "remove", "path": "/hostname"},
    {"op": "remove", "path": "/instance_uuid"},
    {"op": "remove", "path": "/device_rp_uuid"},
]

COVERED: set[str] = set()
F = TypeVar("F", bound=Callable[..., Any])


def covers(*calls: str) -> Callable[[F], F]:
    """Record which client calls a test makes: ``osc:<command>``, ``cyborgclient:<command>``
    or ``sdk:<proxy method>``."""
    COVERED.update(calls)
    return lambda test: test


# --- the cloud -------------------------------------------------------------------------


class Cloud:
    """The all-in-one, its Glance, and the clients pointed at them."""

    def __init__(self, aio: AllInOne, glance: GlanceServer) -> None:
        self.url = aio.url
        self.glance = glance.endpoint
        self.conn = openstack.connection.Connection(
            auth_type="none", auth={"endpoint": aio.url}, image_endpoint_override=self.glance
        )

    def api(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = {**LATEST, **kwargs.pop("headers", {})}
        response = requests.request(method, self.url + path, headers=headers, timeout=30, **kwargs)
        assert response.status_code < 300, response.text
        return response.json() if response.content else None

    def profile(self) -> str:
        name = f"dp-{uuid.uuid4().hex[:8]}"
        self.api("POST", "/v2/device_profiles", json=[{"name": name, "groups": GROUPS}])
        return name

    def arq(self) -> str:
        created = self.api(
            "POST", "/v2/accelerator_requests", json={"device_profile_name": self.profile()}
        )
        arq: str = created["arqs"][0]["uuid"]
        return arq

    def bound_arq(self) -> str:
        arq = self.arq()
        self.api("PATCH", "/v2/accelerator_requests", json={arq: self.bind_ops()})
        return arq

    def show_arq(self, arq: str) -> dict[str, Any]:
        shown: dict[str, Any] = self.api("GET", f"/v2/accelerator_requests/{arq}")
        return shown

    def deployable(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api("GET", "/v2/deployables", params={"name": name})[
            "deployables"
        ][0]
        return found

    def device(self, pci_address: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api("GET", "/v2/devices", params={"pci_address": pci_address})[
            "devices"
        ][0]
        return found

    def bind_ops(self) -> list[dict[str, str]]:
        rp = self.deployable(BIND_REGION)["rp_uuid"]
        return [
            {"op": "add", "path": "/hostname", "value": HOST},
            {"op": "add", "path": "/device_rp_uuid", "value": rp},
            {"op": "add", "path": "/instance_uuid", "value": str(uuid.uuid4())},
        ]

    def attribute(self, key: str = "rack") -> dict[str, Any]:
        body = {
            "deployable_id": self.deployable(BIND_REGION)["uuid"],
            "key": f"{key}-{uuid.uuid4().hex[:8]}",
            "value": "r12",
        }
        created: dict[str, Any] = self.api("POST", "/v2/attributes", json=body)
        return created

    def image(self) -> tuple[str, str]:
        """A bitstream for the programmed region, uploaded to Glance as an operator
        would; its image id and function."""
        function = uuid.uuid4().hex
        image = self.conn.image.create_image(
            f"{function[:8]}.gbs",
            # openstacksdk's annotation says bytes; it streams a file object as well
            data=io.BytesIO(gbs.build(REGION0_TYPE, (function,), payload=b"\x5a" * 4096)),  # type: ignore[arg-type]
            disk_format="raw",
            container_format="bare",
            allow_duplicates=True,
            **cast(
                dict[str, Any],
                {"accel:region_type_uuid": REGION0_TYPE, "accel:function_uuid": function},
            ),
        )
        return str(image.id), function

    def wait_programmed(self, function: str, timeout: float = 60) -> None:
        """Until the agent loaded ``function`` into the programmed region."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            region = self.deployable(PROGRAM_REGION)
            assert region["program_error"] is None, region["program_error"]
            if region["function_uuid"] == function and region["program_phase"] is None:
                return
            time.sleep(0.2)
        raise AssertionError(f"the region was not programmed: {region}")


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory, glance_server: GlanceServer) -> Iterator[Cloud]:
    config = {
        "OS_BITSTREAMS__BACKEND": "glance",
        "OS_GLANCE__AUTH_TYPE": "none",
        "OS_GLANCE__ENDPOINT_OVERRIDE": glance_server.endpoint,
    }
    with all_in_one(tmp_path_factory.mktemp("clients"), HOST, config) as aio:
        found = Cloud(aio, glance_server)
        yield found
        found.conn.close()


# --- the three clients -----------------------------------------------------------------


def osc(cloud: Cloud, *args: str) -> Any:
    """``openstack <args> -f json`` in this process; its parsed output."""
    out, err = io.StringIO(), io.StringIO()
    argv = ["--os-auth-type", "none", "--os-endpoint", cloud.url, *args]
    with _image_endpoint(cloud), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = OpenStackShell().run(argv)
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue()) if out.getvalue().strip() else None


@contextlib.contextmanager
def _image_endpoint(cloud: Cloud) -> Iterator[None]:
    """The CLI finds the image service through OS_IMAGE_ENDPOINT_OVERRIDE."""
    before = os.environ.get("OS_IMAGE_ENDPOINT_OVERRIDE")
    os.environ["OS_IMAGE_ENDPOINT_OVERRIDE"] = cloud.glance
    try:
        yield
    finally:
        if before is None:
            del os.environ["OS_IMAGE_ENDPOINT_OVERRIDE"]
        else:
            os.environ["OS_IMAGE_ENDPOINT_OVERRIDE"] = before


def cyborg(cloud: Cloud, command: type, *argv: str) -> Any:
    """One of python-cyborgclient's commands with the SDK proxies it expects; a ShowOne's
    answer as a dict, a Lister's as a list of dicts."""
    manager = SimpleNamespace(accelerator=cloud.conn.accelerator, image=cloud.conn.image)
    cmd = command(SimpleNamespace(client_manager=manager), None)
    with contextlib.redirect_stdout(io.StringIO()):
        answer = cmd.take_action(cmd.get_parser("openstack").parse_args(list(argv)))
    if answer is None:
        return None
    columns, values = cast(tuple[Any, Any], answer)
    if inspect.isgenerator(values) or isinstance(values, list):
        return [dict(zip(columns, row, strict=True)) for row in cast(list[Any], values)]
    return dict(zip(columns, values, strict=True))


# --- python-openstackclient ------------------------------------------------------------


@covers(
    "osc:accelerator device profile create",
    "osc:accelerator device profile list",
    "osc:accelerator device profile show",
    "osc:accelerator device profile delete",
)
def test_osc_device_profiles(cloud: Cloud) -> None:
    name = f"osc-{uuid.uuid4().hex[:8]}"
    created = osc(
        cloud,
        "accelerator",
        "device",
        "profile",
        "create",
        name,
        json.dumps(GROUPS),
        "--description",
        "from the openstack CLI",
        "-f",
        "json",
    )
    assert (created["name"], created["groups"]) == (name, GROUPS)
    listed = osc(cloud, "accelerator", "device", "profile", "list", "-f", "json")
    assert name in [p["name"] for p in listed]
    shown = osc(cloud, "accelerator", "device", "profile", "show", created["uuid"], "-f", "json")
    assert shown["description"] == "from the openstack CLI"
    osc(cloud, "accelerator", "device", "profile", "delete", name)
    assert name not in [p.name for p in cloud.conn.accelerator.device_profiles()]


@covers(
    "osc:accelerator arq create",
    "osc:accelerator arq list",
    "osc:accelerator arq show",
    "osc:accelerator arq delete",
)
def test_osc_arqs(cloud: Cloud) -> None:
    profile = cloud.profile()
    created = osc(cloud, "accelerator", "arq", "create", profile, "-f", "json")
    assert (created["device_profile_name"], created["state"]) == (profile, "Initial")
    listed = osc(cloud, "accelerator", "arq", "list", "--long", "-f", "json")
    assert created["uuid"] in [a["uuid"] for a in listed]
    shown = osc(cloud, "accelerator", "arq", "show", created["uuid"], "-f", "json")
    assert shown["device_profile_name"] == profile
    osc(cloud, "accelerator", "arq", "delete", created["uuid"])
    with pytest.raises(sdk_exc.NotFoundException):
        cloud.conn.accelerator.get_accelerator_request(created["uuid"])


@covers("osc:accelerator arq unbind")
def test_osc_arq_unbind(cloud: Cloud) -> None:
    arq = cloud.bound_arq()
    assert cloud.show_arq(arq)["state"] == "Bound"
    shown = osc(cloud, "accelerator", "arq", "unbind", arq, "-f", "json")
    assert (shown["state"], shown["instance_uuid"]) == ("Unbound", None)


@covers("osc:accelerator arq bind")
def test_osc_arq_bind(cloud: Cloud) -> None:
    pytest.skip(
        "openstack accelerator arq bind looks the server up in Nova (compute find_server) "
        "before its PATCH, and there is no Nova here: tests/e2e/test_clients.py runs it "
        "against the reference cloud. The PATCH it sends is openstacksdk's "
        "patch_accelerator_request, tested here."
    )


@covers("osc:accelerator deployable list", "osc:accelerator deployable show")
def test_osc_deployables(cloud: Cloud) -> None:
    listed = osc(cloud, "accelerator", "deployable", "list", "-f", "json")
    region = next(d for d in listed if d["name"] == BIND_REGION)
    shown = osc(cloud, "accelerator", "deployable", "show", region["uuid"], "-f", "json")
    assert (shown["uuid"], shown["name"]) == (region["uuid"], BIND_REGION)


@covers("osc:accelerator deployable program")
def test_osc_deployable_program(cloud: Cloud) -> None:
    """The CLI checks the image in Glance, then asks Acceleron, which fetches it from
    the same Glance, verifies it and has the agent program the region."""
    image, function = cloud.image()
    region = cloud.deployable(PROGRAM_REGION)["uuid"]
    shown = osc(cloud, "accelerator", "deployable", "program", region, image, "-f", "json")
    assert shown["uuid"] == region
    cloud.wait_programmed(function)
    assert cloud.deployable(PROGRAM_REGION)["bitstream_id"] == image


@covers(
    "osc:accelerator device list",
    "osc:accelerator device show",
    "osc:accelerator device disable",
    "osc:accelerator device enable",
)
def test_osc_devices(cloud: Cloud) -> None:
    listed = osc(cloud, "accelerator", "device", "list", "-f", "json")
    assert {d["type"] for d in listed} == {"FPGA", "GPU", "QAT"}
    qat = cloud.device(QAT)["uuid"]
    shown = osc(cloud, "accelerator", "device", "show", qat, "-f", "json")
    assert (shown["uuid"], shown["type"]) == (qat, "QAT")
    osc(cloud, "accelerator", "device", "disable", qat)
    assert cloud.device(QAT)["status"] == "maintaining"
    osc(cloud, "accelerator", "device", "enable", qat)
    assert cloud.device(QAT)["status"] == "enabled"


@covers(
    "osc:accelerator device attribute create",
    "osc:accelerator device attribute list",
    "osc:accelerator device attribute show",
    "osc:accelerator device attribute delete",
)
def test_osc_attributes(cloud: Cloud) -> None:
    region = cloud.deployable(BIND_REGION)
    created = osc(
        cloud,
        "accelerator",
        "device",
        "attribute",
        "create",
        region["uuid"],
        "rack",
        "r12",
        "-f",
        "json",
    )
    assert (created["deployable_id"], created["key"], created["value"]) == (
        region["id"],
        "rack",
        "r12",
    )
    listed = osc(cloud, "accelerator", "device", "attribute", "list", "-f", "json")
    assert created["uuid"] in [a["uuid"] for a in listed]
    shown = osc(cloud, "accelerator", "device", "attribute", "show", created["uuid"], "-f", "json")
    assert shown["value"] == "r12"
    osc(cloud, "accelerator", "device", "attribute", "delete", created["uuid"])
    with pytest.raises(sdk_exc.NotFoundException):
        cloud.conn.accelerator.get_attribute(created["uuid"])


def test_the_openstack_command_itself(cloud: Cloud) -> None:
    """The ``openstack`` executable, in its own process, as an operator runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    result = subprocess.run(
        [
            OPENSTACK,
            "--os-auth-type",
            "none",
            "--os-endpoint",
            cloud.url,
            "accelerator",
            "device",
            "list",
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 5


# --- python-cyborgclient ---------------------------------------------------------------


@covers(
    "cyborgclient:accelerator device profile create",
    "cyborgclient:accelerator device profile list",
    "cyborgclient:accelerator device profile show",
    "cyborgclient:accelerator device profile delete",
)
def test_cyborgclient_device_profiles(cloud: Cloud) -> None:
    name = f"cc-{uuid.uuid4().hex[:8]}"
    created = cyborg(
        cloud, cc_dp.CreateDeviceProfile, name, json.dumps(GROUPS), "--description", "cc"
    )
    assert (created["name"], created["groups"]) == (name, GROUPS)
    assert name in [p["name"] for p in cyborg(cloud, cc_dp.ListDeviceProfile)]
    assert cyborg(cloud, cc_dp.ShowDeviceProfile, created["uuid"])["description"] == "cc"
    cyborg(cloud, cc_dp.DeleteDeviceProfile, created["uuid"])
    assert name not in [p.name for p in cloud.conn.accelerator.device_profiles()]


@covers(
    "cyborgclient:accelerator arq create",
    "cyborgclient:accelerator arq list",
    "cyborgclient:accelerator arq show",
    "cyborgclient:accelerator arq delete",
)
def test_cyborgclient_arqs(cloud: Cloud) -> None:
    profile = cloud.profile()
    created = cyborg(cloud, cc_arq.CreateAcceleratorRequest, profile)
    assert (created["device_profile_name"], created["state"]) == (profile, "Initial")
    assert created["uuid"] in [a["uuid"] for a in cyborg(cloud, cc_arq.ListAcceleratorRequest)]
    assert cyborg(cloud, cc_arq.ShowAcceleratorRequest, created["uuid"])["uuid"] == created["uuid"]
    cyborg(cloud, cc_arq.DeleteAcceleratorRequest, created["uuid"])
    with pytest.raises(sdk_exc.NotFoundException):
        cloud.conn.accelerator.get_accelerator_request(created["uuid"])


@covers("cyborgclient:accelerator arq bind", "cyborgclient:accelerator arq unbind")
def test_cyborgclient_bind_and_unbind(cloud: Cloud) -> None:
    arq = cloud.arq()
    ops = {op["path"].lstrip("/"): op["value"] for op in cloud.bind_ops()}
    bound = cyborg(
        cloud,
        cc_arq.BindAcceleratorRequest,
        arq,
        ops["hostname"],
        ops["instance_uuid"],
        ops["device_rp_uuid"],
        "admin",
    )
    assert (bound["state"], bound["instance_uuid"]) == ("Bound", ops["instance_uuid"])
    unbound = cyborg(cloud, cc_arq.UnbindAcceleratorRequest, arq)
    assert (unbound["state"], unbound["instance_uuid"]) == ("Unbound", None)


@covers("cyborgclient:accelerator deployable list", "cyborgclient:accelerator deployable show")
def test_cyborgclient_deployables(cloud: Cloud) -> None:
    region = next(
        d for d in cyborg(cloud, cc_deployable.ListDeployable) if d["name"] == BIND_REGION
    )
    assert cyborg(cloud, cc_deployable.ShowDeployable, region["uuid"])["name"] == BIND_REGION


@covers("cyborgclient:accelerator deployable program")
def test_cyborgclient_deployable_program_fails_in_the_sdk(cloud: Cloud) -> None:
    """python-cyborgclient programs with openstacksdk's deprecated update_deployable,
    which calls itself until Python gives up: no request reaches the service."""
    image, _ = cloud.image()
    region = cloud.deployable(PROGRAM_REGION)
    with pytest.raises(RecursionError):
        cyborg(cloud, cc_deployable.ProgramDeployable, region["uuid"], image)
    assert cloud.deployable(PROGRAM_REGION)["bitstream_id"] == region["bitstream_id"]


@covers(
    "cyborgclient:accelerator device list",
    "cyborgclient:accelerator device show",
    "cyborgclient:accelerator device disable",
    "cyborgclient:accelerator device enable",
)
def test_cyborgclient_devices(cloud: Cloud) -> None:
    assert len(cyborg(cloud, cc_device.ListDevice)) == 5
    qat = cloud.device(QAT)["uuid"]
    assert cyborg(cloud, cc_device.ShowDevice, qat)["type"] == "QAT"
    cyborg(cloud, cc_device.DisableDevice, qat)
    assert cloud.device(QAT)["status"] == "maintaining"
    cyborg(cloud, cc_device.EnableDevice, qat)
    assert cloud.device(QAT)["status"] == "enabled"


@covers(
    "cyborgclient:accelerator device attribute create",
    "cyborgclient:accelerator device attribute list",
    "cyborgclient:accelerator device attribute show",
    "cyborgclient:accelerator device attribute delete",
)
def test_cyborgclient_attributes(cloud: Cloud) -> None:
    region = cloud.deployable(BIND_REGION)
    created = cyborg(cloud, cc_attribute.CreateAttribute, str(region["id"]), "owner", "ml")
    assert (created["deployable_id"], created["key"], created["value"]) == (
        region["id"],
        "owner",
        "ml",
    )
    assert created["uuid"] in [a["uuid"] for a in cyborg(cloud, cc_attribute.ListAttribute)]
    assert cyborg(cloud, cc_attribute.ShowAttribute, created["uuid"])["key"] == "owner"
    cyborg(cloud, cc_attribute.DeleteAttribute, created["uuid"])
    with pytest.raises(sdk_exc.NotFoundException):
        cloud.conn.accelerator.get_attribute(created["uuid"])


# --- openstacksdk ----------------------------------------------------------------------


@covers(
    "sdk:create_device_profile",
    "sdk:device_profiles",
    "sdk:get_device_profile",
    "sdk:delete_device_profile",
)
def test_sdk_device_profiles(cloud: Cloud) -> None:
    acc = cloud.conn.accelerator
    name = f"sdk-{uuid.uuid4().hex[:8]}"
    profile = acc.create_device_profile(name=name, groups=GROUPS, description="sdk")
    assert (profile.name, profile.groups) == (name, GROUPS) and profile.uuid
    assert name in [p.name for p in acc.device_profiles()]
    assert acc.get_device_profile(profile.uuid).description == "sdk"
    with pytest.raises(sdk_exc.ConflictException, match="already exists"):
        acc.create_device_profile(name=name, groups=GROUPS)
    with pytest.raises(sdk_exc.BadRequestException, match="asks for no resource"):
        acc.create_device_profile(name=f"{name}-x", groups=[{"trait:CUSTOM_X": "required"}])
    acc.delete_device_profile(profile.uuid)
    with pytest.raises(sdk_exc.NotFoundException, match="not found"):
        acc.get_device_profile(profile.uuid)


@covers(
    "sdk:create_accelerator_request",
    "sdk:accelerator_requests",
    "sdk:get_accelerator_request",
    "sdk:delete_accelerator_request",
    "sdk:wait_for_delete",
)
def test_sdk_arqs(cloud: Cloud) -> None:
    acc = cloud.conn.accelerator
    profile = cloud.profile()
    arq = acc.create_accelerator_request(device_profile_name=profile)
    assert (arq.device_profile_name, arq.state) == (profile, "Initial")
    assert arq.uuid in [a.uuid for a in acc.accelerator_requests()]
    assert acc.get_accelerator_request(arq.uuid).device_profile_group_id == 0
    acc.delete_accelerator_request(arq.uuid, ignore_missing=False)
    acc.wait_for_delete(arq, interval=0.1, wait=10)
    acc.delete_accelerator_request(arq.uuid)  # ignore_missing: nothing to do
    with pytest.raises(sdk_exc.NotFoundException):
        acc.delete_accelerator_request(arq.uuid, ignore_missing=False)


@covers("sdk:patch_accelerator_request", "sdk:update_accelerator_request", "sdk:wait_for_status")
def test_sdk_bind_and_unbind(cloud: Cloud) -> None:
    """PATCH /v2/accelerator_requests/{uuid} with {uuid: ops}, as both methods send it."""
    acc = cloud.conn.accelerator
    arq = acc.get_accelerator_request(cloud.arq())
    acc.patch_accelerator_request(arq, cloud.bind_ops())
    assert acc.wait_for_status(arq, "Bound", attribute="state", interval=0.1, wait=10)
    acc.patch_accelerator_request(arq.uuid, UNBIND)
    assert acc.get_accelerator_request(arq.uuid).state == "Unbound"
    acc.update_accelerator_request(arq.uuid, cloud.bind_ops())
    assert acc.get_accelerator_request(arq.uuid).state == "Bound"
    acc.update_accelerator_request(arq.uuid, UNBIND)
    assert acc.get_accelerator_request(arq.uuid).state == "Unbound"


@covers("sdk:deployables", "sdk:get_deployable", "sdk:patch_deployable")
def test_sdk_deployables_and_program(cloud: Cloud) -> None:
    acc = cloud.conn.accelerator
    region = next(d for d in acc.deployables() if d.name == PROGRAM_REGION)
    assert acc.get_deployable(region.id).name == PROGRAM_REGION
    image, function = cloud.image()
    patch = [{"path": "/program", "op": "replace", "value": [{"image_uuid": image}]}]
    assert acc.patch_deployable(region.id, patch).name == PROGRAM_REGION
    cloud.wait_programmed(function)


@covers("sdk:update_deployable")
def test_sdk_update_deployable_calls_itself(cloud: Cloud) -> None:
    """The deprecated update_deployable calls itself, not patch_deployable: it fails in
    the SDK before sending anything, against any service."""
    region = cloud.deployable(PROGRAM_REGION)
    with pytest.raises(RecursionError):
        cloud.conn.accelerator.update_deployable(region["uuid"], [])


@covers("sdk:devices", "sdk:get_device", "sdk:disable_device", "sdk:enable_device")
def test_sdk_devices(cloud: Cloud) -> None:
    acc = cloud.conn.accelerator
    assert sorted(d.type for d in acc.devices()) == ["FPGA", "FPGA", "GPU", "GPU", "QAT"]
    qat = cloud.device(QAT)["uuid"]
    assert acc.get_device(qat).type == "QAT"
    acc.disable_device(qat)
    assert cloud.device(QAT)["status"] == "maintaining"
    acc.enable_device(qat)
    assert cloud.device(QAT)["status"] == "enabled"


@covers("sdk:create_attribute", "sdk:attributes", "sdk:get_attribute", "sdk:delete_attribute")
def test_sdk_attributes(cloud: Cloud) -> None:
    acc = cloud.conn.accelerator
    region = cloud.deployable(BIND_REGION)
    created = acc.create_attribute(deployable_id=region["id"], key="zone", value="z1")
    assert (created.deployable_id, created.key, created.value) == (region["id"], "zone", "z1")
    assert created.uuid in [a.uuid for a in acc.attributes()]
    assert acc.get_attribute(created.uuid).value == "z1"
    acc.delete_attribute(created.uuid, ignore_missing=False)
    with pytest.raises(sdk_exc.NotFoundException):
        acc.get_attribute(created.uuid)


# --- every call has its test ----------------------------------------------------------


@functools.cache
def commands(distribution: str) -> set[str]:
    group = "openstack.accelerator.v2"
    entry_points = importlib.metadata.distribution(distribution).entry_points
    return {ep.name.replace("_", " ") for ep in entry_points if ep.group == group}


def test_every_call_is_covered() -> None:
    osc_commands = commands("python-openstackclient")
    cyborg_commands = commands("python-cyborgclient")
    assert len(osc_commands) == len(cyborg_commands) == 21
    methods = {
        name
        for name, member in vars(_proxy.Proxy).items()
        if callable(member) and not name.startswith("_")
    }
    wanted = (
        {f"osc:{c}" for c in osc_commands}
        | {f"cyborgclient:{c}" for c in cyborg_commands}
        | {f"sdk:{m}" for m in methods}
    )
    assert wanted == COVERED
