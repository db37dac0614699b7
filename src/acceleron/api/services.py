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
from acceleron.service.cleaning import Policy as CleaningPolicy
from acceleron.service.device_profiles import Limits as ProfileLimits
from acceleron.service.nova import NovaNotifier
from acceleron.service.provenance import Trust
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
    # Options every request of their kind reads, read once (none changes at a reload):
    # ``[device_profiles]``'s limits, ``[api] public_endpoint``.
    profile_limits: ProfileLimits = dataclasses.field(init=False)
    public_endpoint: str | None = dataclasses.field(init=False)
    # Which held images a request may use as they are (``[bitstreams]``'s signature
    # options and trusted functions).
    trust: Trust = dataclasses.field(init=False)
    # Which cleaning a device given back gets ([cleaning]).
    cleaning: CleaningPolicy = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        profiles = self.conf.device_profiles
        decided = {
            "counting_waits": self.limits.driver != "config",
            "profile_limits": ProfileLimits(
                max_groups=profiles.max_groups,
                max_accelerators=profiles.max_accelerators,
                max_accelerators_per_group=profiles.max_accelerators_per_group,
            ),
            "public_endpoint": self.conf.api.public_endpoint,
            "trust": Trust.from_conf(self.conf),
            "cleaning": CleaningPolicy.from_conf(self.conf),
        }
        for name, value in decided.items():
            object.__setattr__(self, name, value)


def services(app: FastAPI) -> Services:
    """The parts of ``app`` (set by ``create_app``)."""
    found: Services = app.state.services
    return found
