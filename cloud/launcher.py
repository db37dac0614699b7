"""Bring the reference cloud up on 127.0.0.1, and take it down (``make cloud``,
``make cloud-stop``; docs/deploy-with-nova.md describes what runs).

Everything it makes lives under ``.cloud/`` of the checkout (or
``$ACCELERON_CLOUD_DIR``):

* ``venvs/<service>/``: one virtualenv per OpenStack service, from the locked
  requirements in ``cloud/requirements/`` (their pins clash, so one each), made again
  only when the lock changes; Nova's also holds Acceleron (``--no-deps``, editable)
  for the weigher;
* ``run/``: the running cloud: configuration, data, one log per process under
  ``run/logs/``, and ``run/cloud.json``, which says what runs where (ports, process
  ids, databases, credentials); ``run/clouds.yaml`` and ``run/env/<user>.sh`` hold
  the credentials of every test user for openstacksdk, the ``openstack`` CLI and
  scripts (``source .cloud/run/env/admin.sh``); ``$ACCELERON_CLOUD_RUN`` puts it
  elsewhere, so that a second cloud of the same checkout runs beside the first.

Ports are free ones chosen at start; databases and the RabbitMQ vhost carry a random
tag, so that clouds of several checkouts can run side by side.

``python -m cloud up --cyborg`` runs upstream Cyborg (cyborg-api, cyborg-conductor and
a cyborg-agent per compute with its fake driver, from ``venvs/cyborg``) as the
``accelerator`` service instead of Acceleron.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

from cloud.base import (
    ACCELERON,
    COMPUTES,
    CYBORG,
    LOGS,
    REPO,
    RUN,
    SERVICES,
    STATE,
    Cloud,
    CloudError,
    free_ports,
    log,
    restart,
    venv,
)
from cloud.configs import (
    acceleron_config,
    create_databases,
    drop_databases,
    limits_endpoint,
    rabbitmq,
    rabbitmq_vhost,
    write_configs,
    write_credentials,
)
from cloud.cyborg_cloud import acceleron_beside_cyborg, cyborg, cyborg_agents, cyborg_schema
from cloud.releases import previous_release, release_venv
from cloud.services import (
    acceleron,
    acceleron_schema,
    agents,
    barbican,
    computes_in_placement,
    glance,
    keystone,
    neutron,
    nova,
    nova_databases,
    placement,
    signing,
)


def up(nested: bool = True, accelerator: str = ACCELERON, release: str = "") -> Cloud:
    """Start the cloud, with Acceleron or upstream Cyborg (``accelerator``) as its
    accelerator service; Acceleron at the release ``release`` (a commit or tag) rather
    than the checkout's, when given."""
    existing = Cloud.load()
    if existing is not None and existing.running:
        log(f"already running (state in {STATE}); `make cloud-stop` first to start anew")
        return existing
    started = time.monotonic()
    for name in (*SERVICES, CYBORG) if accelerator == CYBORG else SERVICES:
        venv(name)
    version = release_venv(release) if release else ""
    log(f"virtualenvs ready in {time.monotonic() - started:.1f} s")
    shutil.rmtree(RUN, ignore_errors=True)
    LOGS.mkdir(parents=True)
    names = [
        "keystone",
        "placement",
        "glance",
        "nova",
        "neutron",
        "accelerator",
        "acceleron",
        "acceleron-api-1",
        "acceleron-api-2",
        "barbican",
    ]
    cloud = Cloud(
        secrets.token_hex(3),
        secrets.token_urlsafe(12),
        free_ports(names),
        nested,
        accelerator=accelerator,
        release=version,
    )
    cloud.save()
    try:
        write_configs(cloud)
        create_databases(cloud)
        steps: list[Callable[[Cloud], None]] = [
            keystone,
            placement,
            glance,
            barbican,
            nova_databases,
            cyborg_schema if cloud.cyborg else acceleron_schema,
            neutron,
            rabbitmq,
        ]
        in_parallel(cloud, steps)
        log(f"Keystone, Placement, Glance, Barbican up in {time.monotonic() - started:.1f} s")
        timed(signing, cloud)
        nova(cloud)
        if cloud.cyborg:
            cyborg(cloud)
            computes_in_placement(cloud)
            cyborg_agents(cloud)
        else:
            acceleron(cloud)
            computes_in_placement(cloud)
            agents(cloud)
        write_credentials(cloud)
    except BaseException:
        log(f"start failed; stopping what was started (logs stay in {LOGS})")
        down(cloud)
        raise
    log(f"up in {time.monotonic() - started:.1f} s")
    summary(cloud)
    return cloud


def in_parallel(cloud: Cloud, steps: Sequence[Callable[[Cloud], None]]) -> None:
    """Run the steps side by side; the first failure is raised as soon as it happens."""
    pool = concurrent.futures.ThreadPoolExecutor(len(steps))
    futures = [pool.submit(timed, step, cloud) for step in steps]
    done, _ = concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
    pool.shutdown(wait=False)
    for future in done:
        future.result()
    for future in futures:
        future.result()


def timed(step: Callable[[Cloud], None], cloud: Cloud) -> None:
    started = time.monotonic()
    step(cloud)
    log(f"{getattr(step, '__name__', 'step')}: done in {time.monotonic() - started:.1f} s")


def down(cloud: Cloud | None = None) -> None:
    cloud = cloud or Cloud.load()
    if cloud is None:
        log("no cloud to stop")
        return
    started = time.monotonic()
    cloud.stop_all()
    drop_databases(cloud)
    rabbitmq_vhost(cloud, present=False)
    cloud.processes.clear()
    cloud.save()
    log(f"stopped in {time.monotonic() - started:.1f} s (logs kept in {LOGS})")


def to_nested(cloud: Cloud) -> None:
    """What an operator does before ``acceleron placement migrate-to-nested`` (spec 001's
    upgrade): ``[placement] nested = true`` in the API's configuration, then both API
    replicas restarted. The compute nodes keep their flat inventory until the migration."""
    cloud.nested = True
    cloud.save()
    acceleron_config(cloud, limits_endpoint(cloud))
    for index in (1, 2):
        restart(cloud, f"acceleron-api-{index}")


def end_to_end(
    pytest_args: Sequence[str],
    nested: bool = True,
    accelerator: str = ACCELERON,
    upgrade: bool = False,
) -> int:
    """Run tests/e2e against the running cloud, or against one started for the run and
    stopped after it (flat when ``nested`` is false, with upstream Cyborg when
    ``accelerator`` says so: then only tests/e2e/test_cyborg.py runs; on the previous
    release when ``upgrade`` says so: then only tests/e2e/test_upgrade.py runs)."""
    existing = Cloud.load()
    ours = existing is None or not existing.running
    started = time.monotonic()
    if ours:
        release = previous_release() if upgrade else ""
        up(nested=nested, accelerator=accelerator, release=release)
    found = Cloud.load()
    cyborg_runs = found is not None and found.cyborg
    tests = "tests/e2e/test_cyborg.py" if cyborg_runs else "tests/e2e"
    if found is not None and found.release:  # its tallies are printed as it goes
        tests, pytest_args = "tests/e2e/test_upgrade.py", ["-s", *pytest_args]
    env = {**os.environ, "ACCELERON_E2E": "1", "OS_CLIENT_CONFIG_FILE": str(RUN / "clouds.yaml")}
    try:
        argv = [
            str(REPO / ".venv" / "bin" / "pytest"),
            tests,
            "--timeout",
            "900",
            "--durations=15",  # where CI's time goes
            *pytest_args,
        ]
        code = subprocess.run(argv, env=env, cwd=REPO, check=False).returncode
    finally:
        if ours:
            down()
    log(f"end-to-end run: {time.monotonic() - started:.0f} s in all (exit status {code})")
    return code


def summary(cloud: Cloud) -> None:
    print(f"  Keystone     {cloud.auth_url}  (admin / {cloud.password})")
    for kind, (name, url) in cloud.endpoints.items():
        print(f"  {kind:<12} {url}  ({name})")
    agent = "a cyborg-agent" if cloud.cyborg else "an Acceleron agent"
    print(f"  computes     {', '.join(COMPUTES)} (fake driver), {agent} on each")
    print(f"  logs         {LOGS}")
    print(f"  credentials  {RUN / 'clouds.yaml'} (OS_CLIENT_CONFIG_FILE), {RUN / 'env'}/*.sh")
    print(f"Try: source {RUN / 'env' / 'admin.sh'} && openstack accelerator device list")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cloud", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    start = sub.add_parser("up", help="bring the cloud up (nothing if it runs)")
    start.add_argument(
        "--flat",
        action="store_true",
        help="Acceleron publishes flat providers ([placement] nested = false)",
    )
    start.add_argument(
        "--cyborg",
        action="store_true",
        help="upstream Cyborg (API, conductor, an agent per compute with its fake driver) "
        "is the accelerator service instead of Acceleron",
    )
    start.add_argument(
        "--release",
        nargs="?",
        const="previous",
        default="",
        metavar="COMMIT",
        help="Acceleron at this release (a commit or tag; alone: the release before the "
        "checkout's), installed from its own lock, to upgrade from (make e2e-upgrade)",
    )
    sub.add_parser("down", help="stop every process, drop the databases and the vhost")
    sub.add_parser(
        "acceleron",
        help="in a cloud started with --cyborg: start Acceleron's API and agents beside "
        "Cyborg (what `acceleron adopt cyborg` needs); the catalog stays Cyborg's",
    )
    sub.add_parser("venvs", help="make the virtualenvs only")
    e2e = sub.add_parser("e2e", help="run tests/e2e against the cloud (started if need be)")
    e2e.add_argument(
        "--flat",
        action="store_true",
        help="a cloud started for the run is flat (only tests/e2e/test_flat.py then runs)",
    )
    e2e.add_argument(
        "--cyborg",
        action="store_true",
        help="a cloud started for the run has upstream Cyborg (tests/e2e/test_cyborg.py runs)",
    )
    e2e.add_argument(
        "--upgrade",
        action="store_true",
        help="a cloud started for the run has Acceleron's previous release, upgraded under "
        "load by tests/e2e/test_upgrade.py (the only test that runs)",
    )
    e2e.add_argument("pytest_args", nargs="*", help="more pytest arguments")
    sub.add_parser(
        "nested",
        help="set [placement] nested = true and restart the API replicas (a flat cloud's "
        "first step towards migrate-to-nested)",
    )
    again = sub.add_parser("restart", help="start a process of the cloud again")
    again.add_argument("name")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            release = previous_release() if args.release == "previous" else args.release
            accelerator = CYBORG if args.cyborg else ACCELERON
            up(nested=not args.flat, accelerator=accelerator, release=release)
        elif args.command == "down":
            down()
        elif args.command == "acceleron":
            cloud = Cloud.load()
            if cloud is None or not cloud.running:
                raise CloudError("no cloud runs")
            acceleron_beside_cyborg(cloud)
        elif args.command == "e2e":
            accelerator = CYBORG if args.cyborg else ACCELERON
            return end_to_end(
                args.pytest_args,
                nested=not args.flat,
                accelerator=accelerator,
                upgrade=args.upgrade,
            )
        elif args.command == "venvs":
            for name in SERVICES:
                venv(name)
        elif args.command == "nested":
            cloud = Cloud.load()
            if cloud is None or not cloud.running:
                raise CloudError("no cloud runs")
            to_nested(cloud)
        else:
            cloud = Cloud.load()
            if cloud is None or args.name not in cloud.processes:
                raise CloudError(f"no process {args.name!r} in {STATE}")
            restart(cloud, args.name)
    except CloudError as error:
        print(f"cloud: {error}", file=sys.stderr)
        return 1
    return 0
