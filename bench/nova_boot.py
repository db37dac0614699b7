"""Boot time through Nova, with and without accelerators, and Acceleron's share of it.

Needs the reference cloud (``make cloud``). Boots servers one after another, as the
``demo`` member, with three flavors, and deletes each before the next:

* plain: no accelerator;
* device: one QAT VF (``resources:CUSTOM_ACCELERATOR_QAT=1``);
* program: an FPGA region programmed at bind with a bitstream from Glance.

For each it prints the time from ``POST /servers`` to ACTIVE (polled every 0.1 s) and,
with accelerators, Acceleron's share: from the first accelerator request's creation to
the last one's bind (``created_at`` to ``updated_at``: Nova asked, Acceleron bound and
sent the ``accelerator-request-bound`` event).

    .venv/bin/python bench/nova_boot.py [--runs 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import openstack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloud.launcher import RUN, Cloud  # noqa: E402

from acceleron.drivers import gbs  # noqa: E402

REGION_B = "9926ab6d6c925a68aabca7d84c545738"
FUNCTION = "6a1f0c2e3b4d4e5f8a9b0c1d2e3f4a5b"
LATEST = {"OpenStack-API-Version": "accelerator latest"}


def profile_flavor(admin: Any, name: str, group: dict[str, str] | None) -> Any:
    if group is not None:
        admin.accelerator.post("/device_profiles", json=[{"name": name, "groups": [group]}])
    flavor = admin.compute.create_flavor(name=name, ram=64, vcpus=1, disk=1)
    if group is not None:
        admin.compute.create_flavor_extra_specs(flavor, {"accel:device_profile": name})
    return flavor


def bitstream(admin: Any) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.gbs"
        path.write_bytes(gbs.build(REGION_B, (FUNCTION,), payload=b"\x5a" * 65536))
        image = admin.image.create_image(
            name="bench.gbs", filename=str(path), disk_format="raw", container_format="bare",
            visibility="public", wait=True, allow_duplicates=True,
            **{"accel:function_uuid": FUNCTION, "accel:region_type_uuid": REGION_B},
        )  # fmt: skip
    image_id: str = image.id
    return image_id


def boot_once(member: Any, admin: Any, flavor: Any, image: str) -> tuple[float, float | None]:
    started = time.monotonic()
    server = member.compute.create_server(name=f"bench-{uuid.uuid4().hex[:6]}",
                                          flavor_id=flavor.id, image_id=image,
                                          networks="none")  # fmt: skip
    while (found := member.compute.get_server(server.id)).status not in ("ACTIVE", "ERROR"):
        time.sleep(0.1)
    boot = time.monotonic() - started
    if found.status == "ERROR":
        raise SystemExit(f"{server.id} went to ERROR: {found.fault}")
    arqs = admin.accelerator.get("/accelerator_requests", params={"instance": server.id},
                                 headers=LATEST).json()["arqs"]  # fmt: skip
    share = None
    if arqs:
        first = min(dt.datetime.fromisoformat(a["created_at"]) for a in arqs)
        last = max(dt.datetime.fromisoformat(a["updated_at"]) for a in arqs)
        share = (last - first).total_seconds()
    member.compute.delete_server(server.id)
    member.compute.wait_for_delete(server, wait=120)
    return boot, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="boots per flavor")
    args = parser.parse_args()
    found = Cloud.load()
    if found is None or not found.running:
        raise SystemExit("No reference cloud runs: `make cloud` first.")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(RUN / "clouds.yaml")
    admin = openstack.connect(cloud="acceleron-admin")
    member = openstack.connect(cloud="acceleron-member")
    tag = uuid.uuid4().hex[:6]
    image = admin.image.create_image(name=f"bench-{tag}", data=b"\0" * 1024,
                                     disk_format="raw", container_format="bare",
                                     visibility="public", wait=True)  # fmt: skip
    program = {"resources:CUSTOM_ACCELERATOR_FPGA": "1",
               f"trait:CUSTOM_FPGA_INTEL_REGION_{REGION_B.upper()}": "required",
               "accel:bitstream_id": bitstream(admin)}  # fmt: skip
    flavors = {
        "plain": profile_flavor(admin, f"bench-plain-{tag}", None),
        "device": profile_flavor(admin, f"bench-qat-{tag}",
                                 {"resources:CUSTOM_ACCELERATOR_QAT": "1"}),
        "program": profile_flavor(admin, f"bench-fpga-{tag}", program),
    }  # fmt: skip
    print(f"{'flavor':<8} {'boot median':>12} {'min':>7} {'max':>7} {'Acceleron median':>17}")
    for label, flavor in flavors.items():
        results = [boot_once(member, admin, flavor, image.id) for _ in range(args.runs)]
        boots = [b for b, _ in results]
        shares = [s for _, s in results if s is not None]
        share = f"{statistics.median(shares):.2f} s" if shares else "-"
        print(f"{label:<8} {statistics.median(boots):>10.2f} s {min(boots):>5.2f} s "
              f"{max(boots):>5.2f} s {share:>17}")  # fmt: skip
    for label, flavor in flavors.items():
        admin.compute.delete_flavor(flavor)
        if label != "plain":
            admin.accelerator.delete(f"/device_profiles/{flavor.name}")
    admin.image.delete_image(image)


if __name__ == "__main__":
    main()
