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

``--compare`` races upstream Cyborg against Acceleron on one cloud, started with
``python -m cloud up --cyborg`` and not adopted yet, in one invocation: it measures
Cyborg (the catalog's accelerator service), runs upstream's tempest API tests against
it, starts Acceleron beside it, adopts it (``acceleron adopt cyborg``), points the
catalog at Acceleron, stops Cyborg, restarts the computes (docs/adopt-from-cyborg.md,
step 6), and measures Acceleron the same way. Per side, ``--runs`` boots (20 by default)
of each flavor, all on the card both sides see (the fake driver's FPGA, one handle of
its 16):

* plain: no accelerator (the baseline of the overhead);
* device: one accelerator of the card, as a service;
* function: one accelerator of a card that holds a function (pre-programmed; Cyborg's
  fake driver cannot program, so its provider carries the trait Cyborg records after
  programming, set beforehand, and Acceleron's region holds the function);
* program: a function programmed at bind from a bitstream in Glance (Acceleron
  programs it at every bind: two bitstreams take turns; Cyborg tries once and the
  failure is printed: its fake driver cannot program).

The device and function flavors are the same flavors and device profiles on both sides
(the adoption takes the profiles over). For each: boot to ACTIVE p50/p95; bind, from
Nova's call to bind (nova-conductor's ``Binding ARQs.``) to the last
``accelerator-request-bound`` event Nova takes (nova-api's ``Creating event``), p50/p95,
both from Nova's logs; the ratios Acceleron/Cyborg; and each side's accelerator overhead,
the p50 boot with the accelerator minus the p50 plain boot.

    .venv/bin/python bench/nova_boot.py --compare [--runs 20] [--tempest new-defaults,legacy]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import openstack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cloud.base import LOGS, REGION, RUN, Cloud, venv  # noqa: E402
from cloud.configs import connect, render  # noqa: E402
from cloud.cyborg_cloud import (  # noqa: E402
    acceleron_beside_cyborg,
    adopt_cyborg,
    cyborg_programmed,
    switch_to_acceleron,
)

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
            name="bench.gbs",
            filename=str(path),
            disk_format="raw",
            container_format="bare",
            visibility="public",
            wait=True,
            allow_duplicates=True,
            **{"accel:function_uuid": FUNCTION, "accel:region_type_uuid": REGION_B},
        )
    image_id: str = image.id
    return image_id


def boot(member: Any, flavor: Any, image: str, prefix: str) -> tuple[Any, Any, float]:
    """A server created, its state once ACTIVE or ERROR, and the seconds that took."""
    started = time.monotonic()
    server = member.compute.create_server(
        name=f"{prefix}-{uuid.uuid4().hex[:6]}",
        flavor_id=flavor.id,
        image_id=image,
        networks="none",
    )
    while (found := member.compute.get_server(server.id)).status not in ("ACTIVE", "ERROR"):
        time.sleep(0.1)
    return server, found, time.monotonic() - started


def boot_once(member: Any, admin: Any, flavor: Any, image: str) -> tuple[float, float | None]:
    server, found, boot_seconds = boot(member, flavor, image, "bench")
    if found.status == "ERROR":
        raise SystemExit(f"{server.id} went to ERROR: {found.fault}")
    arqs = admin.accelerator.get(
        "/accelerator_requests", params={"instance": server.id}, headers=LATEST
    ).json()["arqs"]
    share = None
    if arqs:
        first = min(dt.datetime.fromisoformat(a["created_at"]) for a in arqs)
        last = max(dt.datetime.fromisoformat(a["updated_at"]) for a in arqs)
        share = (last - first).total_seconds()
    member.compute.delete_server(server.id)
    member.compute.wait_for_delete(server, wait=120)
    return boot_seconds, share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--runs", type=int, default=None, help="boots per flavor (5; 20 per side with --compare)"
    )
    parser.add_argument(
        "--compare", action="store_true", help="upstream Cyborg against Acceleron, one cloud"
    )
    parser.add_argument(
        "--tempest",
        default="new-defaults,legacy",
        help="with --compare: the tempest policy modes run on each side "
        "(comma-separated; empty: none)",
    )
    args = parser.parse_args()
    if args.compare:
        modes = [m for m in args.tempest.split(",") if m]
        compare(args.runs or 20, modes)
        return
    args.runs = args.runs or 5
    found = Cloud.load()
    if found is None or not found.running:
        raise SystemExit("No reference cloud runs: `make cloud` first.")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(RUN / "clouds.yaml")
    admin = openstack.connect(cloud="acceleron-admin")
    member = openstack.connect(cloud="acceleron-member")
    tag = uuid.uuid4().hex[:6]
    image = admin.image.create_image(
        name=f"bench-{tag}",
        data=b"\0" * 1024,
        disk_format="raw",
        container_format="bare",
        visibility="public",
        wait=True,
    )
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
        print(
            f"{label:<8} {statistics.median(boots):>10.2f} s {min(boots):>5.2f} s "
            f"{max(boots):>5.2f} s {share:>17}"
        )
    for label, flavor in flavors.items():
        admin.compute.delete_flavor(flavor)
        if label != "plain":
            admin.accelerator.delete(f"/device_profiles/{flavor.name}")
    admin.image.delete_image(image.id)


# --- --compare: upstream Cyborg against Acceleron on one cloud ---------------------------

CARD_REGION = "5f0c4c6a0e9b4e4f9a53d1f7c8e2b6a1"  # cloud/templates/inventory-cyborg.yaml
PREPROGRAMMED = "6a1f0c2e3b4d4e5f8a9b0c1d2e3f4a5b"  # the function that region holds
AT_BIND = ("0c3e1f5a7b9d4c2e8f6a1b3d5c7e9f01", "1d4f2a6b8c0e4d3f9a7b2c4e6d8f0a12")
ACCELERON_FUNCTION = f"CUSTOM_FPGA_FUNCTION_ID_INTEL_{PREPROGRAMMED.upper()}"
FAKE = {"resources:FPGA": "1", "trait:CUSTOM_FAKE_DEVICE": "required"}
LABELS = ("plain", "device", "function", "program")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3})")
# nova-api's request log line of an event's POST, logged as it ends: its duration
EVENTS = re.compile(r'"POST /v2.1/os-server-external-events" status: \d+ .* time: ([\d.]+)')


@dataclasses.dataclass
class Boot:
    seconds: float  # POST /servers to ACTIVE
    bind: float | None  # Nova's bind call to its last accelerator-request-bound event


class NovaLogs:
    """The lines nova-conductor and nova-api logged since the last ``mark``."""

    def __init__(self) -> None:
        self.paths = {"conductor": LOGS / "nova-conductor.log", "api": LOGS / "nova-api.log"}
        self.offsets = dict.fromkeys(self.paths, 0)

    def mark(self) -> None:
        self.offsets = {k: p.stat().st_size for k, p in self.paths.items()}

    def since(self, which: str) -> list[str]:
        with self.paths[which].open("rb") as log:
            log.seek(self.offsets[which])
            return log.read().decode(errors="replace").splitlines()

    def bind(self, request_id: str) -> float | None:
        """Seconds from the conductor's ``Binding ARQs.`` of the boot's request to the
        arrival at Nova's API of the last ``accelerator-request-bound`` event after it
        (a bind over before the server has a host is answered 207 and the event dropped:
        Nova's compute then finds the requests bound already; it arrived all the same).
        Boots run one at a time: every event after the mark is the boot's."""
        start = [
            _at(line)
            for line in self.since("conductor")
            if request_id in line and "Binding ARQs." in line
        ]
        events = [
            _at(line) - dt.timedelta(seconds=float(found.group(1)))
            for line in self.since("api")
            if (found := EVENTS.search(line))
        ]
        if not start or not events:
            return None
        return (max(events) - min(start)).total_seconds()


def _at(line: str) -> dt.datetime:
    found = STAMP.match(line)
    if found is None:
        raise ValueError(f"no time stamp: {line[:80]}")
    return dt.datetime.fromisoformat(found.group(1))


def timed_boot(member: Any, admin: Any, logs: NovaLogs, flavor: Any, image: str) -> Boot | str:
    """One server booted, timed and deleted; the fault instead when it went to ERROR."""
    logs.mark()
    server, found, seconds = boot(member, flavor, image, "race")
    actions = admin.compute.get(f"/servers/{server.id}/os-instance-actions").json()
    (request_id,) = [a["request_id"] for a in actions["instanceActions"] if a["action"] == "create"]
    result: Boot | str = (
        Boot(seconds, logs.bind(request_id))
        if found.status == "ACTIVE"
        else str((found.fault or {}).get("message", "ERROR"))
    )
    member.compute.delete_server(server.id)
    member.compute.wait_for_delete(server, wait=120)
    return result


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


@dataclasses.dataclass
class Series:
    boots: list[Boot] = dataclasses.field(default_factory=list)
    failed: str | None = None  # why this side could not boot the flavor at all

    def p(self, what: str, share: float) -> float | None:
        values = [v for b in self.boots if (v := getattr(b, what)) is not None]
        return percentile(values, share) if values else None


def measure(
    member: Any, admin: Any, flavors: dict[str, list[Any]], image: str, runs: int, side: str
) -> dict[str, Series]:
    """``runs`` boots of each flavor, one after the other; a flavor is given up at its
    first boot that fails (the fault kept). A label with several flavors takes them in
    turn."""
    logs, results = NovaLogs(), {}
    for label, choices in flavors.items():
        series = results[label] = Series()
        for run in range(runs):
            done = timed_boot(member, admin, logs, choices[run % len(choices)], image)
            if isinstance(done, str):
                series.failed = done
                print(f"{side} {label}: boot {run + 1} went to ERROR: {done}", flush=True)
                break
            series.boots.append(done)
        print(
            f"{side} {label}: {len(series.boots)} boots, p50 {_s(series.p('seconds', 0.5))}",
            flush=True,
        )
    return results


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or not theirs else f"{ours / theirs:.2f}"


def report(cyborg: dict[str, Series], acceleron: dict[str, Series], runs: int) -> None:
    print(f"\n{runs} boots per flavor and side; times are p50 / p95.")
    print(
        f"{'flavor':<9} {'side':<10} {'boot to ACTIVE':>17} {'bind to event':>17} {'overhead':>9}"
    )
    overheads: dict[str, dict[str, float | None]] = {}
    for label in LABELS:
        for side, results in (("Cyborg", cyborg), ("Acceleron", acceleron)):
            series = results[label]
            if series.failed is not None and not series.boots:
                print(f"{label:<9} {side:<10} cannot: {series.failed[:90]}")
                continue
            boot50, plain50 = series.p("seconds", 0.5), results["plain"].p("seconds", 0.5)
            over = None
            if boot50 is not None and plain50 is not None and label != "plain":
                over = boot50 - plain50
            overheads.setdefault(label, {})[side] = over
            print(
                f"{label:<9} {side:<10} {_s(boot50):>8} {_s(series.p('seconds', 0.95)):>8} "
                f"{_s(series.p('bind', 0.5)):>8} {_s(series.p('bind', 0.95)):>8} "
                f"{_s(over):>9}"
            )
    print("\nAcceleron / Cyborg:")
    for label in LABELS:
        c, a = cyborg[label], acceleron[label]
        sides = overheads.get(label, {})
        print(
            f"{label:<9} boot p50 {_ratio(a.p('seconds', 0.5), c.p('seconds', 0.5))}, "
            f"p95 {_ratio(a.p('seconds', 0.95), c.p('seconds', 0.95))}; bind p50 "
            f"{_ratio(a.p('bind', 0.5), c.p('bind', 0.5))}, p95 "
            f"{_ratio(a.p('bind', 0.95), c.p('bind', 0.95))}; overhead "
            f"{_ratio(sides.get('Acceleron'), sides.get('Cyborg'))} (goal: <= 0.50)"
        )


def race_bitstream(admin: Any, function: str) -> str:
    """A bitstream of ``function`` for the card's region, in Glance."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"race-{function[:8]}.gbs"
        path.write_bytes(gbs.build(CARD_REGION, (function,), payload=b"\x5a" * 65536))
        image = admin.image.create_image(
            name=path.name,
            filename=str(path),
            disk_format="raw",
            container_format="bare",
            visibility="public",
            wait=True,
            allow_duplicates=True,
            **{"accel:function_uuid": function, "accel:region_type_uuid": CARD_REGION},
        )
    image_id: str = image.id
    return image_id


def tempest(cloud: Cloud, mode: str, side: str) -> dict[str, Any]:
    """cyborg-tempest-plugin's API tests in policy mode ``mode`` against whatever the
    catalog's accelerator endpoint is now; the tally of its closing summary."""
    from tests.e2e.test_tempest import SUITE, short, tally

    bin_dir, workspace = venv("tempest") / "bin", RUN / f"race-tempest-{side}-{mode}"
    subprocess.run(
        [
            str(bin_dir / "tempest"),
            "init",
            "--workspace-path",
            str(RUN / "tempest.yaml"),
            "--name",
            f"race-{side}-{mode}",
            str(workspace),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    values = {"workspace": str(workspace), "password": cloud.password,
              "auth_url": cloud.auth_url, "region": REGION,
              "new_defaults": str(mode == "new-defaults").lower()}  # fmt: skip
    render("tempest.conf", workspace / "etc" / "tempest.conf", values)
    started = time.monotonic()
    done = subprocess.run(
        [str(bin_dir / "tempest"), "run", "--regex", SUITE, "--concurrency", "2"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=1200,
        check=False,
    )
    failing = subprocess.run(
        [str(bin_dir / "stestr"), "failing", "--list"],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    ).stdout
    counts = tally(done.stdout)
    failed = sorted({short(x) for x in failing.split() if x.startswith("cyborg_")})
    print(
        f"tempest {mode} against {side}: {counts} in {time.monotonic() - started:.0f} s", flush=True
    )
    return {**counts, "failed_tests": failed}


def tempest_report(tallies: dict[str, dict[str, dict[str, Any]]]) -> None:
    if not tallies:
        return
    print("\nupstream's tempest API tests (cyborg_tempest_plugin.tests.api):")
    print(f"{'mode':<13} {'side':<10} {'passed':>7} {'failed':>7} {'skipped':>8}")
    for mode, sides in tallies.items():
        for side, counts in sides.items():
            print(
                f"{mode:<13} {side:<10} {counts.get('passed', 0):>7} "
                f"{counts.get('failed', 0):>7} {counts.get('skipped', 0):>8}"
            )
        only = {s: set(c["failed_tests"]) for s, c in sides.items()}
        for side, failed in only.items():
            others = set().union(*(f for s, f in only.items() if s != side))
            if failed - others:
                print(f"  fail only against {side}: {', '.join(sorted(failed - others))}")


def compare(runs: int, modes: list[str]) -> None:
    cloud = Cloud.load()
    if cloud is None or not cloud.running or not cloud.cyborg:
        raise SystemExit("No Cyborg cloud runs: `python -m cloud up --cyborg` first.")
    os.environ["OS_CLIENT_CONFIG_FILE"] = str(RUN / "clouds.yaml")
    admin = connect(cloud)
    (service,) = admin.identity.services(type="accelerator")
    if (
        service.name != "cyborg"
        or "cyborg-api" not in cloud.processes
        or not cloud.processes["cyborg-api"].alive
    ):
        raise SystemExit(
            "The catalog's accelerator is not Cyborg (adopted already?): "
            "`python -m cloud down && python -m cloud up --cyborg`."
        )
    tag = uuid.uuid4().hex[:6]
    admin = openstack.connect(cloud="acceleron-admin")
    member = openstack.connect(cloud="acceleron-member")
    image = admin.image.create_image(
        name=f"race-{tag}",
        data=b"\0" * 1024,
        disk_format="raw",
        container_format="bare",
        visibility="public",
        wait=True,
    )
    bitstreams = [race_bitstream(admin, f) for f in AT_BIND]
    function_trait = cyborg_programmed(cloud, PREPROGRAMMED)
    shared = {
        "plain": [profile_flavor(admin, f"race-plain-{tag}", None)],
        "device": [profile_flavor(admin, f"race-device-{tag}", FAKE)],
        "function": [profile_flavor(admin, f"race-function-{tag}",
                                    {**FAKE, f"trait:{function_trait}": "required"})],
    }  # fmt: skip
    cyborg_program = profile_flavor(
        admin, f"race-program-c-{tag}", {**FAKE, "accel:bitstream_id": bitstreams[0]}
    )
    flavors = {**shared, "program": [cyborg_program]}
    cyborg = measure(member, admin, flavors, image.id, runs, "Cyborg")
    tallies: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in modes:
        tallies.setdefault(mode, {})["Cyborg"] = tempest(cloud, mode, "Cyborg")
    # Cyborg's program profile names Cyborg's bitstream form: not taken over.
    admin.compute.delete_flavor(cyborg_program)
    admin.accelerator.delete(f"/device_profiles/{cyborg_program.name}")

    acceleron_beside_cyborg(cloud)
    with tempfile.TemporaryDirectory() as tmp:
        mapping = Path(tmp) / "mapping.yaml"
        traits = {"CUSTOM_FAKE_DEVICE": "CUSTOM_FPGA_INTEL", function_trait: ACCELERON_FUNCTION}
        mapping.write_text(json.dumps({"traits": traits}))
        done = adopt_cyborg(cloud, mapping)
    if done.returncode != 0:
        raise SystemExit(f"acceleron adopt cyborg failed:\n{done.stdout}{done.stderr}")
    switch_to_acceleron(cloud)
    admin = openstack.connect(cloud="acceleron-admin")  # a new token: the new catalog
    member = openstack.connect(cloud="acceleron-member")
    region_trait = f"CUSTOM_FPGA_INTEL_REGION_{CARD_REGION.upper()}"
    programs = [
        profile_flavor(
            admin,
            f"race-program-a{i}-{tag}",
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                f"trait:{region_trait}": "required",
                "accel:bitstream_id": bitstream,
            },
        )
        for i, bitstream in enumerate(bitstreams)
    ]
    acceleron = measure(member, admin, {**shared, "program": programs}, image.id, runs, "Acceleron")
    for mode in modes:
        tallies.setdefault(mode, {})["Acceleron"] = tempest(cloud, mode, "Acceleron")
    report(cyborg, acceleron, runs)
    tempest_report(tallies)
    record = {
        side: {label: [dataclasses.asdict(b) for b in s.boots] for label, s in r.items()}
        for side, r in (("cyborg", cyborg), ("acceleron", acceleron))
    }
    (RUN / "race.json").write_text(json.dumps({**record, "tempest": tallies}, indent=1) + "\n")
    print(f"\nEvery boot's figures: {RUN / 'race.json'}")
    for flavor in [*[f for fs in shared.values() for f in fs], *programs]:
        admin.compute.delete_flavor(flavor)
        if not flavor.name.startswith("race-plain"):
            admin.accelerator.delete(f"/device_profiles/{flavor.name}")
    for made in [image.id, *bitstreams]:
        admin.image.delete_image(made)


if __name__ == "__main__":
    main()
