"""The real OpenStack clients against a live Acceleron: no Acceleron code on the client side.

* ``openstack accelerator device profile ...`` (python-openstackclient with the
  python-cyborgclient plugin installed), run as a separate process;
* openstacksdk's ``conn.accelerator`` device profile calls;
* python-cyborgclient's own command classes, driven over an openstacksdk proxy.

Each discovers the API through the version documents, as Nova does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import openstack
import pytest
from cyborgclient.osc.v2 import device_profile as cyborg_dp
from openstack import exceptions as sdk_exc

pytestmark = pytest.mark.slow

OPENSTACK = str(Path(sys.executable).parent / "openstack")
GROUPS = [{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "trait:CUSTOM_FPGA_INTEL": "required"}]


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def osc(url: str, *args: str) -> Any:
    """Run the openstack CLI with noauth against the live API; parse its JSON output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    result = subprocess.run(
        [OPENSTACK, "--os-auth-type", "none", "--os-endpoint", url, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else None


def test_openstack_cli_create_list_show_delete(live_api: str) -> None:
    name = unique("osc")
    created = osc(
        live_api, "accelerator", "device", "profile", "create", name, json.dumps(GROUPS),
        "--description", "from the openstack CLI", "-f", "json",
    )  # fmt: skip
    assert created["name"] == name
    assert created["groups"] == GROUPS
    listed = osc(live_api, "accelerator", "device", "profile", "list", "-f", "json")
    assert name in [p["name"] for p in listed]
    shown = osc(live_api, "accelerator", "device", "profile", "show", created["uuid"], "-f", "json")
    assert shown["description"] == "from the openstack CLI"
    osc(live_api, "accelerator", "device", "profile", "delete", created["uuid"])
    listed = osc(live_api, "accelerator", "device", "profile", "list", "-f", "json")
    assert name not in [p["name"] for p in listed]


@pytest.fixture
def conn(live_api: str) -> openstack.connection.Connection:
    return openstack.connect(auth_type="none", auth={"endpoint": live_api})


def test_openstacksdk_device_profiles(conn: openstack.connection.Connection) -> None:
    name = unique("sdk")
    profile = conn.accelerator.create_device_profile(
        name=name, groups=GROUPS, description="from openstacksdk"
    )
    assert profile.name == name and profile.groups == GROUPS and profile.uuid
    assert name in [p.name for p in conn.accelerator.device_profiles()]
    fetched = conn.accelerator.get_device_profile(profile.uuid)
    assert fetched.description == "from openstacksdk"
    with pytest.raises(sdk_exc.ConflictException, match="already exists"):
        conn.accelerator.create_device_profile(name=name, groups=GROUPS)
    with pytest.raises(sdk_exc.BadRequestException, match="asks for no resource"):
        conn.accelerator.create_device_profile(
            name=unique("bad"), groups=[{"trait:CUSTOM_X": "required"}]
        )
    conn.accelerator.delete_device_profile(profile.uuid)
    with pytest.raises(sdk_exc.NotFoundException, match="not found"):
        conn.accelerator.get_device_profile(profile.uuid)


def run_cyborgclient(conn: openstack.connection.Connection, command: type, *argv: str) -> Any:
    """Run one of python-cyborgclient's OSC commands with the SDK proxy it expects."""
    app = SimpleNamespace(client_manager=SimpleNamespace(accelerator=conn.accelerator))
    cmd = command(app, None)
    return cmd.take_action(cmd.get_parser("openstack").parse_args(list(argv)))


def test_cyborgclient_commands(conn: openstack.connection.Connection) -> None:
    name = unique("cyborgclient")
    columns, values = run_cyborgclient(
        conn, cyborg_dp.CreateDeviceProfile, name, json.dumps(GROUPS), "--description", "cc"
    )
    created = dict(zip(columns, values, strict=True))
    assert created["name"] == name and created["groups"] == GROUPS
    columns, rows = run_cyborgclient(conn, cyborg_dp.ListDeviceProfile)
    assert name in [dict(zip(columns, row, strict=True))["name"] for row in rows]
    columns, values = run_cyborgclient(conn, cyborg_dp.ShowDeviceProfile, created["uuid"])
    assert dict(zip(columns, values, strict=True))["description"] == "cc"
    run_cyborgclient(conn, cyborg_dp.DeleteDeviceProfile, created["uuid"])
    assert name not in [p.name for p in conn.accelerator.device_profiles()]
