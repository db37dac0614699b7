"""Starting each OpenStack service of the reference cloud, and Acceleron's API and agents."""

from __future__ import annotations

import base64
import datetime as dt
import sys
from collections.abc import Callable
from typing import Any

from cloud.base import (
    CLOUD,
    COMPUTES,
    MYSQL,
    REGION,
    REGISTERED_LIMITS,
    REPO,
    RUN,
    USERS,
    VENVS,
    Cloud,
    answers,
    run,
    wait_for,
)
from cloud.configs import acceleron_config, connect, limits_endpoint, render, variables
from cloud.releases import acceleron_command


def wsgi(
    cloud: Cloud, name: str, app: str, env: dict[str, str], port: str = "", *args: str
) -> None:
    """Serve ``app`` from the virtualenv of the service ``name`` on its port (or on the
    port named ``port``); ``args`` are the arguments the application reads."""
    service = name.removesuffix("-api")
    python = str(VENVS / service / "bin" / "python")
    listen = str(cloud.ports[port or service])
    cloud.start(name, [python, str(CLOUD / "wsgi_runner.py"), app, listen, *args], env)


def keystone(cloud: Cloud) -> None:
    manage = [
        str(VENVS / "keystone" / "bin" / "keystone-manage"),
        "--config-file",
        str(RUN / "keystone" / "keystone.conf"),
    ]
    run([*manage, "db_sync"], what="keystone-manage db_sync")
    for setup in ("fernet_setup", "credential_setup"):
        run(
            [*manage, setup, "--keystone-user", "root", "--keystone-group", "root"],
            what=f"keystone-manage {setup}",
        )
    url = cloud.url("keystone")
    run(
        [
            *manage,
            "bootstrap",
            f"--bootstrap-password={cloud.password}",  # it may start with "-"
            "--bootstrap-admin-url",
            url,
            "--bootstrap-public-url",
            url,
            "--bootstrap-internal-url",
            url,
            "--bootstrap-region-id",
            REGION,
        ],
        what="keystone-manage bootstrap",
    )
    wsgi(
        cloud,
        "keystone",
        "keystone.wsgi.api:application",
        {"OS_KEYSTONE_CONFIG_DIR": str(RUN / "keystone")},
    )
    wait_for("Keystone", answers(f"{url}/v3"), cloud, ["keystone"])
    identity(cloud)


def identity(cloud: Cloud) -> None:
    """Projects, users and roles, and the catalog."""
    conn = connect(cloud)
    ident = conn.identity
    roles = {r.name: r for r in ident.roles()}
    if "service" not in roles:
        roles["service"] = ident.create_role(name="service")
    domain = ident.find_domain("default")
    projects = {}
    for name in ("service", "demo", "alt", "signed"):
        projects[name] = ident.create_project(name=name, domain_id=domain.id)
    for user, (project, wanted) in USERS.items():
        created = ident.create_user(
            name=user,
            password=cloud.password,
            domain_id=domain.id,
            default_project_id=projects[project].id,
        )
        for role in wanted:
            ident.assign_project_role_to_user(projects[project], created, roles[role])
        if user == "acceleron":  # oslo.limit reads the endpoint and the limits
            ident.assign_system_role_to_user(created, roles["reader"], "all")
    for kind, (name, url) in cloud.endpoints.items():
        service = ident.create_service(name=name, type=kind)
        for interface in ("public", "internal"):
            ident.create_endpoint(
                service_id=service.id, interface=interface, url=url, region_id=REGION
            )
        if kind == "accelerator":
            for resource, default in REGISTERED_LIMITS.items():
                ident.create_registered_limit(
                    service_id=service.id,
                    region_id=REGION,
                    resource_name=resource,
                    default_limit=default,
                )


def placement(cloud: Cloud) -> None:
    env = {"OS_PLACEMENT_CONFIG_DIR": str(RUN / "placement")}
    run(
        [
            str(VENVS / "placement" / "bin" / "placement-manage"),
            "--config-file",
            str(RUN / "placement" / "placement.conf"),
            "db",
            "sync",
        ],
        what="placement-manage db sync",
    )
    wsgi(cloud, "placement", "placement.wsgi.api:application", env)
    wait_for("Placement", answers(cloud.url("placement")), cloud, ["placement"])


def glance(cloud: Cloud) -> None:
    config = str(RUN / "glance" / "glance-api.conf")
    run(
        [str(VENVS / "glance" / "bin" / "glance-manage"), "--config-file", config, "db_sync"],
        what="glance-manage db_sync",
    )
    wsgi(
        cloud,
        "glance",
        "glance.wsgi.api:application",
        {"OS_GLANCE_CONFIG_DIR": str(RUN / "glance")},
    )
    wait_for("Glance", answers(cloud.url("glance")), cloud, ["glance"])


def barbican(cloud: Cloud) -> None:
    """Barbican behind Keystone (the catalog's key-manager), its simple crypto plugin
    keeping the secrets in SQLite: where Glance and the agents read the certificates of
    signed bitstreams (docs/bitstreams.md)."""
    database = f"sqlite:///{RUN / 'barbican' / 'barbican.sqlite'}"
    run(
        [str(VENVS / "barbican" / "bin" / "barbican-manage"), "db", "upgrade", "-d", database],
        what="barbican-manage db upgrade",
    )
    # Barbican reads barbican.conf from the default places only (~/ is one).
    wsgi(cloud, "barbican", "barbican_wsgi:application", {"HOME": str(RUN / "barbican")})
    wait_for("Barbican", answers(cloud.url("barbican")), cloud, ["barbican"])


def signing(cloud: Cloud) -> None:
    """A CA for bitstream signers (its certificate and key in run/barbican/), its
    certificate stored in Barbican by the agents' user; the agents trust it, and require
    signed bitstreams for the requests of the project ``signed``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "Reference cloud FPGA CA")])
    now = dt.datetime.now(dt.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    folder = RUN / "barbican"
    (folder / "signing-ca.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "signing-ca.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    conn = connect(cloud, "acceleron", "service")
    secret = conn.key_manager.create_secret(
        name="reference-cloud-fpga-ca",
        secret_type="certificate",
        algorithm="RSA",
        # PEM: castellan reads a certificate secret as PEM (Glance and the agents alike).
        payload=base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode(),
        payload_content_type="application/octet-stream",
        payload_content_encoding="base64",
    )
    cloud.signing_ca = str(secret.secret_ref).rsplit("/", 1)[-1]
    cloud.signed_project = str(connect(cloud).identity.find_project("signed").id)
    cloud.save()
    values = variables(cloud)
    for host in COMPUTES:
        render(
            "acceleron-agent.conf", RUN / "acceleron" / host / "agent.conf", values | {"host": host}
        )


def nova_databases(cloud: Cloud) -> None:
    manage = [
        str(VENVS / "nova" / "bin" / "nova-manage"),
        "--config-file",
        str(RUN / "nova" / "nova.conf"),
    ]
    run([*manage, "api_db", "sync"], what="nova-manage api_db sync")
    cell0 = f"{MYSQL}/{cloud.database('nova_cell0')}?charset=utf8mb4"
    run(
        [*manage, "cell_v2", "map_cell0", "--database_connection", cell0],
        what="nova-manage cell_v2 map_cell0",
    )
    run([*manage, "db", "sync"], what="nova-manage db sync")
    run(
        [*manage, "cell_v2", "create_cell", "--name", "cell1"],
        what="nova-manage cell_v2 create_cell",
    )


def nova(cloud: Cloud) -> None:
    bin_dir, config = VENVS / "nova" / "bin", str(RUN / "nova" / "nova.conf")
    wsgi(
        cloud,
        "nova-api",
        "nova.wsgi.osapi_compute:application",
        {"OS_NOVA_CONFIG_DIR": str(RUN / "nova")},
    )
    for service in ("conductor", "scheduler"):
        cloud.start(
            f"nova-{service}", [str(bin_dir / f"nova-{service}"), "--config-file", config], {}
        )
    for host in COMPUTES:
        cloud.start(
            f"nova-{host}",
            [
                str(bin_dir / "nova-compute"),
                "--config-file",
                config,
                "--config-file",
                str(RUN / "nova" / f"{host}.conf"),
            ],
            {},
        )
    wait_for("nova-api", answers(cloud.url("nova")), cloud, ["nova-api"])


def acceleron_schema(cloud: Cloud) -> None:
    """Acceleron's database schema."""
    command = acceleron_command(cloud)
    config = ["--config-file", str(RUN / "acceleron" / "acceleron.conf")]
    run([command, *config, "db", "upgrade"], what="acceleron db upgrade")


def acceleron(cloud: Cloud) -> None:
    """Two API replicas and the balancer in front of them (once Keystone's catalog and
    registered limits are made: their configuration names the accelerator endpoint)."""
    command = acceleron_command(cloud)
    config = ["--config-file", str(acceleron_config(cloud, limits_endpoint(cloud)))]
    replicas = []
    for index in (1, 2):
        name = f"acceleron-api-{index}"
        cloud.start(name, [command, *config, "api", "--port", str(cloud.ports[name])], {})
        replicas.append(str(cloud.ports[name]))
    # In HTTP mode: a replica can be drained before it stops (upgrade()).
    front = ["-m", "cloud.balancer", "--http", str(cloud.ports[cloud.acceleron_port])]
    cloud.start("balancer", [sys.executable, *front, *replicas], {"PYTHONPATH": str(REPO)})
    for index in (1, 2):
        name = f"acceleron-api-{index}"
        wait_for(name, answers(cloud.url(name)), cloud, [name])


def compute_reports(admin: Any, host: str, since: dt.datetime) -> Callable[[], bool]:
    """Whether the nova-compute of ``host`` has reported its state since ``since`` (UTC):
    a compute started reports only once it has looked at its resources and Placement
    (a compute still stopping reports too: take ``since`` once it has gone)."""

    def check() -> bool:
        (found,) = admin.compute.services(binary="nova-compute", host=host)
        updated = dt.datetime.fromisoformat(str(found.updated_at)).replace(tzinfo=None)
        return bool(found.state == "up" and updated > since)

    return check


def neutron(cloud: Cloud) -> None:
    cloud.start(
        "neutron-standin",
        [sys.executable, "-m", "cloud.neutron_standin", str(cloud.ports["neutron"])],
        {"PYTHONPATH": str(REPO)},
    )
    wait_for("the Neutron stand-in", answers(cloud.url("neutron")), cloud, ["neutron-standin"])


def computes_in_placement(cloud: Cloud) -> None:
    """Wait for both compute nodes in Placement, then map them into the cell."""
    conn = connect(cloud)

    def both() -> bool:
        names = {rp.name for rp in conn.placement.resource_providers()}
        return set(COMPUTES) <= names

    wait_for(
        "the compute nodes in Placement",
        both,
        cloud,
        [f"nova-{h}" for h in COMPUTES] + ["nova-conductor"],
    )
    run(
        [
            str(VENVS / "nova" / "bin" / "nova-manage"),
            "--config-file",
            str(RUN / "nova" / "nova.conf"),
            "cell_v2",
            "discover_hosts",
        ],
        what="nova-manage cell_v2 discover_hosts",
    )


def agents(cloud: Cloud) -> None:
    """One agent per compute host; wait until each host's accelerators are in Placement
    (child providers, or the compute node's own inventory in a flat cloud)."""
    command = acceleron_command(cloud)
    for host in COMPUTES:
        cloud.start(
            f"agent-{host}",
            [command, "--config-file", str(RUN / "acceleron" / host / "agent.conf"), "agent"],
            {},
        )
    conn = connect(cloud)

    def published() -> bool:
        roots = {rp.name: rp.id for rp in conn.placement.resource_providers()}
        for host in COMPUTES:
            if cloud.nested:
                # The compute node and Acceleron's card and region (and Cyborg's device).
                tree = list(conn.placement.resource_providers(in_tree=roots[host]))
                if len(tree) < (4 if cloud.cyborg else 2):
                    return False
            else:
                # Flat: the classes land on the compute node itself (spec 001's fallback).
                inventory = conn.placement.get(
                    f"/resource_providers/{roots[host]}/inventories",
                    headers={"OpenStack-API-Version": "placement 1.14"},
                ).json()["inventories"]
                if not any(rc.startswith("CUSTOM_ACCELERATOR_") for rc in inventory):
                    return False
        return True

    wait_for(
        "the accelerators in Placement",
        published,
        cloud,
        [f"agent-{h}" for h in COMPUTES] + ["acceleron-api-1", "acceleron-api-2"],
    )
