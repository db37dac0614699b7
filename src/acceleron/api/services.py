"""The API application's parts, made once by ``create_app`` and typed for their readers.

Handlers read them as ``call.services``, workers as ``services(app)``. Only what
never changes once the app is made is here; what is built on first use or swapped
while the app runs (the bitstream store, the Placement sync worker, the reconciler)
stays on ``app.state``.
"""

from __future__ import annotations

import dataclasses
import threading

from fastapi import FastAPI
from oslo_config import cfg

from acceleron.api.auth import Authenticator
from acceleron.api.capacity import Threads, UploadSlots
from acceleron.api.policy import Policy
from acceleron.api.wakeup import TaskWakeup
from acceleron.db.session import Database
from acceleron.service.nova import NovaNotifier
from acceleron.service.quotas import Limits


@dataclasses.dataclass(frozen=True)
class Services:
    conf: cfg.ConfigOpts
    db: Database
    policy: Policy
    auth: Authenticator
    nova: NovaNotifier
    limits: Limits
    threads: Threads
    uploads: UploadSlots
    task_wakeup: TaskWakeup
    stopping: threading.Event  # set when the server begins to stop
    # Whether a call that counts against the limits waits on another service: the
    # limits come from Keystone (oslo.limit), not from the config file. Decided once,
    # here, where the quota driver is known; ``Call.run_counted`` runs by it.
    counting_waits: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "counting_waits", self.limits.driver != "config")


def services(app: FastAPI) -> Services:
    """The parts of ``app`` (set by ``create_app``)."""
    found: Services = app.state.services
    return found
