"""The all-in-one: Acceleron on one machine, in one process (what ``make run`` starts).

* the API on ``[api] host_ip:port``;
* the real OpenStack Placement, embedded, on SQLite in the data directory, served
  under ``/placement`` of the same port (token ``admin`` for its admin API);
* the agent of this host (the fake driver by default), reporting over HTTP to the
  API as any agent does;
* the local bitstream store in the data directory.

Everything lives in ``[DEFAULT] state_path``: a restart finds it as it was.
Ctrl-C stops it cleanly.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path

import uvicorn
from oslo_config import cfg

from acceleron.agent import tasks
from acceleron.agent.client import connect
from acceleron.agent.loop import Agent, Settings
from acceleron.api.app import UVICORN_OPTIONS, Server, create_app
from acceleron.db import migrate
from acceleron.db import session as db_session
from acceleron.drivers import fake, load_drivers
from acceleron.drivers.base import Watching

LOG = logging.getLogger(__name__)
# Seconds open requests get at shutdown (an agent's long poll for work is cut there).
GRACE = 2


def configure(conf: cfg.ConfigOpts, host: str, port: int) -> None:
    """The embedded defaults: Placement in this process, the agent talking to this API."""
    conf.set_override("mode", "embedded", "placement")
    conf.set_override("api_endpoint", f"http://{host}:{port}", "agent")
    if "fake" in conf.agent.enabled_drivers and not conf.fake.inventory_file:
        # Its operator is whoever runs it: the built-in regions' functions are theirs.
        conf.set_default("trusted_functions", fake.built_in_functions(), "bitstreams")


def run(conf: cfg.ConfigOpts, sock: socket.socket) -> None:
    """Serve on ``sock`` (bound already, logging set up) until interrupted."""
    started = time.monotonic()
    host, port = sock.getsockname()[:2]
    configure(conf, host, port)
    # The embedded Placement's SQLite file lives there, whatever Acceleron's database is.
    Path(conf.state_path).mkdir(parents=True, exist_ok=True)
    db = db_session.from_conf(conf)
    migrate.all_phases(db)
    app = create_app(conf, db, settle=True)
    agent = Agent(
        Settings.from_conf(conf), load_drivers(conf, Path(conf.agent.root)), connect(conf)
    )
    runner = tasks.TaskRunner(
        tasks.Settings.from_conf(conf), agent.drivers, agent.client, agent.schedule.event
    )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        **UVICORN_OPTIONS,
        timeout_graceful_shutdown=GRACE,
    )
    server = Server(config, app, on_stop=[agent.stop, runner.stop])
    thread = threading.Thread(
        target=_agent_when_ready, args=(server, agent, runner, started), name="agent", daemon=True
    )
    thread.start()
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn hands Ctrl-C on once it has shut down
        pass
    finally:
        agent.stop()
        runner.stop()
        thread.join(timeout=5)
        db.dispose()
    LOG.info("Acceleron all-in-one stopped")


def _agent_when_ready(
    server: uvicorn.Server, agent: Agent, runner: tasks.TaskRunner, started: float
) -> None:
    """Start the agent and its task runner once the API answers (they talk to it over
    HTTP, as on any other host)."""
    while not server.started:
        if server.should_exit:
            return
        time.sleep(0.01)
    LOG.info("Acceleron all-in-one ready in %.1f s", time.monotonic() - started)
    threading.Thread(target=runner.run, name="tasks", daemon=True).start()
    for driver in agent.drivers:
        if isinstance(driver, Watching):
            driver.start_watch(agent.schedule.urgent)
    agent.run()
