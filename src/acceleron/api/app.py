"""The API application: routers, error mapping, auth and policy, in one factory."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from oslo_config import cfg

import acceleron
from acceleron.api import auth, device_profiles, errors, hosts, versions
from acceleron.api.middleware import ApiMiddleware
from acceleron.api.policy import Policy
from acceleron.db import migrate
from acceleron.db import session as db_session

DESCRIPTION = """\
Acceleron's REST API: the OpenStack accelerator v2 API (device profiles,
accelerator requests, devices, deployables) plus Acceleron's additions, each
behind a microversion. Send `OpenStack-API-Version: accelerator 2.x`; no
header means 2.0.
"""


def create_app(
    conf: cfg.ConfigOpts, db: db_session.Database | None = None, check_schema: bool = True
) -> FastAPI:
    database = db or db_session.from_conf(conf)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        if check_schema:
            migrate.check(database)
        yield
        if db is None:
            database.dispose()

    app = FastAPI(
        title="Acceleron API",
        version=acceleron.__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        redoc_url=None,
    )
    app.state.conf = conf
    app.state.db = database
    app.state.policy = Policy(conf)
    app.state.auth = auth.from_conf(conf)
    errors.install(app)
    app.include_router(versions.router)
    app.include_router(device_profiles.router)
    app.include_router(hosts.router)
    app.add_middleware(ApiMiddleware)
    return app


def from_environment() -> FastAPI:
    """The app for uvicorn worker processes: config files from ACCELERON_CONFIG_FILES."""
    import json
    import os

    from acceleron import conf as confmod
    from acceleron import logs

    files = json.loads(os.environ.get("ACCELERON_CONFIG_FILES", "null"))
    conf = confmod.load([], config_files=files)
    logs.setup(conf.debug)
    return create_app(conf)
