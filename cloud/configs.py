"""The reference cloud's configuration: credentials, the services' configuration files
rendered from cloud/templates, the databases and the RabbitMQ vhost, and an
openstacksdk connection to the running cloud."""

from __future__ import annotations

import base64
import hashlib
import shutil
import string
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from cloud.base import (
    CLOUD,
    COMPUTES,
    MYSQL,
    POSTGRESQL,
    REGION,
    REPO,
    RUN,
    SERVICE_USERS,
    VENVS,
    Cloud,
    run,
)


def credentials(cloud: Cloud, user: str) -> str:
    """keystoneauth's options for a service user, as lines of a config section."""
    return "\n".join(
        [
            "auth_type = password",
            f"auth_url = {cloud.auth_url}",
            f"username = {user}",
            f"password = {cloud.password}",
            "project_name = service",
            "user_domain_name = Default",
            "project_domain_name = Default",
            f"region_name = {REGION}",
        ]
    )


def authtoken(cloud: Cloud, user: str) -> str:
    """[keystone_authtoken] of a service whose tokens are checked by ``user``."""
    return "\n".join(
        [
            f"www_authenticate_uri = {cloud.auth_url}",
            credentials(cloud, user).replace(f"region_name = {REGION}", ""),
            "service_token_roles_required = true",
        ]
    ).strip()


def variables(cloud: Cloud) -> dict[str, str]:
    found = {
        "run": str(RUN),
        "python": sys.executable,
        "repo": str(REPO),
        "debug": "false",
        "mysql": MYSQL,
        "postgresql": POSTGRESQL,
        "vhost": cloud.vhost,
        "nested": str(cloud.nested).lower(),
        "accelerator_url": cloud.url(cloud.acceleron_port),
        # Beside Cyborg, the agents report to Acceleron's balancer, not to the catalog's
        # accelerator endpoint (Cyborg's until the adoption).
        "agent_endpoint": f"api_endpoint = {cloud.url('acceleron')}" if cloud.cyborg else "",
        "keystone_url": cloud.auth_url,
        "password": cloud.password,
        "barbican_url": cloud.url("barbican"),
        # Barbican's simple crypto plugin's key-encryption key: 32 bytes of this cloud's.
        "barbican_kek": base64.b64encode(
            hashlib.sha256(f"{cloud.tag}:{cloud.password}".encode()).digest()
        ).decode(),
        "signing_ca": cloud.signing_ca,
        "signed_project": cloud.signed_project,
        **{
            f"db_{n}": cloud.database(n)
            for n in ("keystone", "placement", "nova_api", "nova_cell1", "acceleron", "cyborg")
        },
    }
    for user in SERVICE_USERS:
        found[f"credentials_{user.replace('-', '_')}"] = credentials(cloud, user)
        found[f"authtoken_{user.replace('-', '_')}"] = authtoken(cloud, user)
    return found


def render(template: str, target: Path, values: Mapping[str, str]) -> Path:
    text = (CLOUD / "templates" / template).read_text()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(string.Template(text).substitute(values))
    return target


def acceleron_config(cloud: Cloud, limits_endpoint: str) -> Path:
    """The API replicas' configuration; [oslo_limit] endpoint_id is ``limits_endpoint``
    (the accelerator endpoint's id, known once Keystone's catalog is made)."""
    values = {**variables(cloud), "limits_endpoint": limits_endpoint}
    return render("acceleron.conf", RUN / "acceleron" / "acceleron.conf", values)


# The compute whose inventory gains a GPU carved on demand (cloud/templates/
# inventory-mig.yaml) in a nested cloud of the checkout.
MIG_HOST = "compute-1"


def write_configs(cloud: Cloud) -> None:
    values = variables(cloud)
    render("keystone.conf", RUN / "keystone" / "keystone.conf", values)
    render("placement.conf", RUN / "placement" / "placement.conf", values)
    render("glance-api.conf", RUN / "glance" / "glance-api.conf", values)
    render("nova.conf", RUN / "nova" / "nova.conf", values)
    render("barbican.conf", RUN / "barbican" / "barbican.conf", values)
    shutil.copy(
        VENVS / "barbican" / "etc" / "barbican" / "barbican-api-paste.ini", RUN / "barbican"
    )
    acceleron_config(cloud, limits_endpoint="")  # for the schema; again once Keystone runs
    if cloud.cyborg:
        render("cyborg.conf", RUN / "cyborg" / "cyborg.conf", values)
        shutil.copy(VENVS / "cyborg" / "etc" / "cyborg" / "api-paste.ini", RUN / "cyborg")
        (RUN / "cyborg" / "locks").mkdir()
    for index, host in enumerate(COMPUTES, 1):
        render(
            "nova-compute.conf",
            RUN / "nova" / f"{host}.conf",
            {**values, "index": str(index), "host": host},
        )
        if cloud.cyborg:
            render(
                "cyborg-agent.conf",
                RUN / "cyborg" / f"cyborg-agent-{host}.conf",
                values | {"host": host},
            )
        render(
            "acceleron-agent.conf",
            RUN / "acceleron" / host / "agent.conf",
            {**values, "host": host},
        )
        inventory = "inventory-cyborg.yaml" if cloud.cyborg else f"inventory-{host}.yaml"
        written = render(inventory, RUN / "acceleron" / host / "inventory.yaml", values)
        if host == MIG_HOST and cloud.nested and not (cloud.cyborg or cloud.release):
            mig = (CLOUD / "templates" / "inventory-mig.yaml").read_text()
            written.write_text(written.read_text().rstrip("\n") + "\n" + mig)
    shutil.copy(VENVS / "glance" / "etc" / "glance" / "glance-api-paste.ini", RUN / "glance")
    shutil.copy(VENVS / "nova" / "etc" / "nova" / "api-paste.ini", RUN / "nova")
    computes = [f"nova/{host}/instances" for host in COMPUTES]
    for sub in ("glance/images", "glance/staging", "glance/tasks", "nova/locks", *computes):
        (RUN / sub).mkdir(parents=True, exist_ok=True)


def create_databases(cloud: Cloud) -> None:
    import psycopg
    import pymysql

    mysql = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    with mysql.cursor() as cursor:
        for name in cloud.mysql_databases:
            cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    mysql.close()
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as pg:
        pg.execute(f'CREATE DATABASE "{cloud.database("acceleron")}"')


def drop_databases(cloud: Cloud) -> None:
    import psycopg
    import pymysql

    mysql = pymysql.connect(host="127.0.0.1", user="root", autocommit=True)
    with mysql.cursor() as cursor:
        for name in cloud.mysql_databases:
            cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
    mysql.close()
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/postgres", autocommit=True) as pg:
        pg.execute(f'DROP DATABASE IF EXISTS "{cloud.database("acceleron")}" WITH (FORCE)')


def rabbitmq(cloud: Cloud) -> None:
    rabbitmq_vhost(cloud, present=True)


def rabbitmq_vhost(cloud: Cloud, present: bool) -> None:
    if present:
        run(["rabbitmqctl", "-q", "add_vhost", cloud.vhost], what="rabbitmqctl add_vhost")
        run(
            ["rabbitmqctl", "-q", "set_permissions", "-p", cloud.vhost, "guest", ".*", ".*", ".*"],
            what="rabbitmqctl set_permissions",
        )
    else:
        subprocess.run(
            ["rabbitmqctl", "-q", "delete_vhost", cloud.vhost],
            capture_output=True,
            timeout=60,
            check=False,
        )


def connect(cloud: Cloud, user: str = "admin", project: str = "admin") -> Any:
    import openstack

    return openstack.connect(
        auth_url=cloud.auth_url,
        username=user,
        password=cloud.password,
        project_name=project,
        user_domain_name="Default",
        project_domain_name="Default",
        region_name=REGION,
        load_yaml_config=False,
        load_envvars=False,
    )


def limits_endpoint(cloud: Cloud) -> str:
    """The id of the accelerator service's public endpoint: oslo.limit's endpoint_id."""
    conn = connect(cloud)
    (service,) = conn.identity.services(type="accelerator")
    (endpoint,) = conn.identity.endpoints(service_id=service.id, interface="public")
    return str(endpoint.id)


def write_credentials(cloud: Cloud) -> None:
    """run/clouds.yaml (clouds acceleron-admin, -member, -alt-member, -reader,
    -signer, -service) and run/env/<user>.sh with the same as OS_* variables."""
    users = {
        "admin": "admin",
        "member": "demo",
        "alt-member": "alt",
        "signer": "signed",
        "reader": "demo",
        "service": "service",
    }
    (RUN / "env").mkdir(exist_ok=True)
    clouds: dict[str, Any] = {}
    for label, project in users.items():
        user = "acceleron" if label == "service" else label
        auth = {
            "auth_url": cloud.auth_url,
            "username": user,
            "password": cloud.password,
            "project_name": project,
            "user_domain_name": "Default",
            "project_domain_name": "Default",
        }
        clouds[f"acceleron-{label}"] = {
            "auth": auth,
            "region_name": REGION,
            "identity_api_version": "3",
        }
        lines = [f"export OS_{k.upper()}={v}" for k, v in auth.items()]
        lines += [
            f"export OS_REGION_NAME={REGION}",
            "export OS_IDENTITY_API_VERSION=3",
            "unset OS_CLOUD",
        ]
        (RUN / "env" / f"{label}.sh").write_text("\n".join(lines) + "\n")
    if cloud.cyborg:
        # Upstream Cyborg reads a bitstream's image from Glance, when a profile asks for
        # programming at bind, as the cloud `devstack-admin` of a clouds.yaml (its
        # processes run in RUN, one of the places openstacksdk looks).
        clouds["devstack-admin"] = clouds["acceleron-admin"]
    import yaml

    (RUN / "clouds.yaml").write_text(yaml.safe_dump({"clouds": clouds}, sort_keys=False))
