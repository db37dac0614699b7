"""Configuration: one INI file (``acceleron.conf``) plus environment overrides.

Every option Acceleron reads is registered here, so the sample configuration
(``acceleron config sample``) is generated from this module and cannot drift.
Any option can be overridden from the environment as ``OS_<GROUP>__<OPTION>``
(for example ``OS_DATABASE__CONNECTION``); that is oslo.config's own rule.
Later sections (``[placement]``, ``[glance]``, ``[nova]``) hold keystoneauth
session and auth options and are registered by the modules that use them.
"""

from __future__ import annotations

import contextlib
import io
import socket
from collections.abc import Iterable, Sequence
from typing import Any

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg, generator, types
from oslo_log import log as oslo_log

PROJECT = "acceleron"

DEFAULT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<hostname>",
        help="Name of this host. On a compute host it must be the name the compute "
        "service (and Placement) knows the host by.",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/acceleron",
        help="Directory for Acceleron's own files: the SQLite database of the embedded "
        "mode and the local bitstream store.",
    ),
    cfg.StrOpt(
        "auth_strategy",
        default="noauth",
        choices=[
            (
                "noauth",
                "No authentication. Every caller is an admin unless the X-Roles, "
                "X-Project-Id and X-User-Id headers say otherwise. For the embedded mode only.",
            ),
            ("keystone", "Validate tokens with Keystone (see [keystone_authtoken])."),
        ],
        help="How API callers are authenticated.",
    ),
]

# oslo.log's [DEFAULT] options (debug, log_file, log_dir, use_journal, use_json,
# default_log_levels, ...) are registered too, with these loggers quieter than oslo.log's
# own list has them: the all-in-one's default output is Acceleron's own INFO lines.
QUIET_LOGGERS = {
    # Every request to the embedded Placement (some 80 as a host is first published).
    "placement.requestlog": "WARN",
    # Each step of a schema upgrade (Acceleron logs what they amount to).
    "alembic.runtime.migration": "WARN",
    "oslo_policy": "WARN",
    "urllib3": "WARN",
    "uvicorn.access": "WARN",
}


def _log_defaults() -> None:
    """oslo.log's default ``default_log_levels`` with Acceleron's quieter loggers."""
    levels = [
        pair
        for pair in oslo_log.get_default_log_levels()
        if pair.partition("=")[0] not in QUIET_LOGGERS
    ]
    levels += [f"{name}={level}" for name, level in QUIET_LOGGERS.items()]
    oslo_log.set_defaults(default_log_levels=levels)


API_OPTS: list[cfg.Opt] = [
    cfg.HostAddressOpt("host_ip", default="127.0.0.1", help="Address the API listens on."),
    cfg.PortOpt("port", default=6666, help="Port the API listens on."),
    cfg.IntOpt(
        "workers", default=1, min=1, help="Number of API worker processes (not in all-in-one)."
    ),
    cfg.IntOpt(
        "shutdown_timeout",
        default=30,
        min=0,
        help="Seconds the requests still running when the API is asked to stop (SIGTERM) get "
        "to finish before they are cut. Agents' long polls for work answer at once. Drain a "
        "replica at the balancer before stopping it all the same (docs/install.md).",
    ),
    cfg.URIOpt(
        "public_endpoint",
        help="Base URL clients reach the API at, used in version document links when "
        "the API sits behind a proxy. Defaults to the URL of the incoming request.",
    ),
    cfg.IntOpt(
        "max_limit",
        default=1000,
        min=1,
        help="Largest page a list request may ask for with ?limit=.",
    ),
    cfg.FloatOpt(
        "client_timeout",
        default=30.0,
        min=0.1,
        help="Seconds a client may keep the API waiting while it sends a request body, or "
        "while it reads an answer, without a byte moving: then the request is cut (408 "
        "for a body; the connection closed for an answer), so a stalled client holds "
        "nothing for longer.",
    ),
    cfg.IntOpt(
        "service_reserve",
        default=25,
        min=0,
        max=90,
        help="Percent of the threads for database work (one per connection of "
        "[database] max_pool_size + max_overflow) kept for services: agents and Nova "
        "(role service, or a service token) get through however many other requests "
        "wait.",
    ),
    cfg.FloatOpt(
        "queue_timeout",
        default=10.0,
        min=0.1,
        help="Seconds a request waits for a thread for database work before it is "
        "answered 503 acceleron.overloaded (with Retry-After).",
    ),
    cfg.StrOpt(
        "task_wakeup",
        default="notify",
        choices=[
            (
                "notify",
                "wake an agent's long poll as soon as a task is queued for its host: "
                "in-process, and on PostgreSQL across API processes with LISTEN/NOTIFY",
            ),
            (
                "local",
                "wake it in-process only; tasks queued by another API process are found by polling",
            ),
            ("poll", "no wake-up: a waiting poll looks at the database every 0.25 s"),
        ],
        help="How an agent waiting for work (POST /v2/hosts/{host}/tasks/claim?wait=) "
        "learns that a task was queued for it. Where no signal reaches the process, a "
        "waiting poll looks every 0.25 s; where one does, it looks when it comes and when "
        "woken (a lost signal: the agent's next poll finds the task).",
    ),
    cfg.IntOpt(
        "max_host_report_size",
        default=4 * 1024 * 1024,
        min=1,
        help="Largest host report, in bytes, an agent may send (PUT "
        "/v2/hosts/{host}/report, application/json): a host with many GPUs and vGPU types "
        "reports more than [oslo_middleware] max_request_body_size. Larger is answered 413.",
    ),
]

# oslo.middleware's own option (its sizelimit filter), under its name and default, as
# every OpenStack API service reads it.
OSLO_MIDDLEWARE_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "max_request_body_size",
        default=114_688,
        min=1,
        help="Largest request body, in bytes, the API reads, whatever its route and "
        "Content-Type: a larger one is answered 413 acceleron.too_large before it is read "
        "(by its Content-Length, or once that many bytes of a chunked body came). A host "
        "report's JSON ([api] max_host_report_size) and a bitstream upload's "
        "application/octet-stream ([bitstreams] max_size_mb) have their own limits.",
    ),
]

DATABASE_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "connection",
        default="sqlite:///$state_path/acceleron.sqlite",
        secret=True,
        help="SQLAlchemy URL of the database: sqlite:///..., "
        "postgresql+psycopg://user:pass@host/db or mysql+pymysql://user:pass@host/db.",
    ),
    cfg.IntOpt("max_pool_size", default=10, min=1, help="Connections kept open per process."),
    cfg.IntOpt("max_overflow", default=20, min=0, help="Extra connections allowed at peak."),
    cfg.IntOpt(
        "connection_recycle_time",
        default=3600,
        help="Seconds after which a pooled connection is replaced.",
    ),
    cfg.IntOpt(
        "sqlite_busy_timeout",
        default=30,
        min=0,
        help="Seconds a SQLite writer waits for the database lock before failing.",
    ),
]

PROFILE_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "max_groups",
        default=32,
        min=1,
        help="Most request groups a device profile may have.",
    ),
    cfg.IntOpt(
        "max_accelerators",
        default=128,
        min=1,
        help=(
            "Most accelerators one device profile may ask for, over all its groups. Only "
            "accelerator classes count (CUSTOM_ACCELERATOR_<TYPE>, FPGA, PGPU, VGPU): "
            "memory (CUSTOM_ACCELERATOR_MEMORY_*, in MB) and other amounts do not."
        ),
    ),
    cfg.IntOpt(
        "max_accelerators_per_group",
        default=16,
        min=1,
        help=(
            "Most accelerators one group of a device profile may ask for (counted as for "
            "max_accelerators). Each accelerator becomes one accelerator request when the "
            "profile is used, so this bounds the rows one request or claim makes; a profile "
            "with a larger group is refused when it is created (400)."
        ),
    ),
]

BITSTREAM_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "backend",
        default="local",
        choices=[
            (
                "local",
                "Content-addressed files under local_dir, metadata in the database. "
                "For the embedded mode.",
            ),
            ("glance", "OpenStack Glance images with accel:* properties (see [glance])."),
        ],
        help="Where bitstreams are kept and looked up.",
    ),
    cfg.StrOpt(
        "local_dir",
        default="$state_path/bitstreams",
        help="Directory of the local store's files, one per distinct content, named by "
        "the SHA-256 of that content.",
    ),
    cfg.StrOpt(
        "cache_dir",
        default="$state_path/bitstream-cache",
        help="Per-host cache of downloaded bitstreams, keyed by their hash; a cached "
        "file is verified again before it is reused.",
    ),
    cfg.IntOpt(
        "max_size_mb",
        default=1024,
        min=1,
        help="Largest bitstream, in MiB, the API takes in an upload (PUT "
        "/v2/bitstreams/{uuid}/data, application/octet-stream; a body of another type "
        "there has [oslo_middleware] max_request_body_size); a larger one is refused "
        "with 413.",
    ),
    cfg.IntOpt(
        "max_uploads_per_project",
        default=2,
        min=1,
        help="Uploads one project may have in progress at once, per API process; one "
        "more is answered 429 acceleron.over_limit. A stalled upload ends after [api] "
        "client_timeout seconds without a byte.",
    ),
    cfg.BoolOpt(
        "verify_signatures",
        default=False,
        help="Agent: program only bitstreams whose signature (the img_signature* "
        "properties, as Glance and Nova use them) verifies on this host, over the bytes "
        "programmed; an unsigned or badly signed bitstream fails its bind. Off: signatures "
        "are checked only for the projects in require_signatures_projects (a signed "
        "bitstream's signature is checked all the same, and the result recorded). API: "
        "a region's image is reused as it is only if its signature verified. Set it "
        "alike on the API and the agents.",
    ),
    cfg.ListOpt(
        "require_signatures_projects",
        default=[],
        help="Agent: project ids whose requests get only verified, signed bitstreams "
        "programmed, even with verify_signatures off. Programs an admin asks for outside "
        "any request follow verify_signatures alone. API: these projects' requests reuse "
        "an image a region holds only if its signature verified when it was loaded. Set "
        "it alike on the API and the agents.",
    ),
    cfg.ListOpt(
        "trusted_functions",
        default=[],
        help="API: function ids (AFU ids, any spelling) of the images an operator loads "
        "outside Acceleron (pre-programmed functions) that requests of every project may "
        "use as found. A region holding a function Acceleron did not load, and not listed "
        "here, is programmed again (or the request refused) before a request uses it. The "
        "all-in-one trusts the functions its fake driver's built-in inventory holds.",
    ),
    cfg.ListOpt(
        "trusted_certificate_ids",
        default=[],
        help="Agent: ids of the certificates a signing certificate must be, or be issued "
        "by (directly), for its signature to count; looked up like signing certificates. "
        "Empty: every certificate in certificate_dir is trusted, and none from the key "
        "manager is.",
    ),
    cfg.StrOpt(
        "certificate_backend",
        default="directory",
        choices=[
            ("directory", "PEM or DER files in certificate_dir, each named <id>.pem or <id>.der."),
            (
                "key_manager",
                "Barbican (or another castellan key manager) as [key_manager] configures it, "
                "the way Nova and Glance read img_signature_certificate_uuid.",
            ),
        ],
        help="Agent: where signing and trusted certificates are looked up by id.",
    ),
    cfg.StrOpt(
        "certificate_dir",
        default="$state_path/bitstream-certificates",
        help="Agent: directory of certificates for certificate_backend = directory.",
    ),
    cfg.IntOpt(
        "min_signing_key_bits",
        default=2048,
        min=1024,
        max=16384,
        help="Agent: the shortest RSA or DSA key, in bits, a signing certificate may hold; "
        "a signature by a shorter one is refused (weak_key). ECC keys are as long as "
        "their curve (P-384, P-521).",
    ),
]

# The drivers (acceleron.drivers); docs/drivers.md explains each one.
AGENT_DRIVER_OPTS: list[cfg.Opt] = [
    cfg.ListOpt(
        "enabled_drivers",
        default=["fake"],
        help="Drivers the agent asks for devices, by entry-point name (group "
        "acceleron.drivers): fake, pci, intel_fpga, xilinx_fpga, nvidia_gpu, intel_qat.",
    ),
]

# The agent (acceleron.agent); docs/agent.md explains it. Its [agent] group also
# holds keystoneauth's options (KEYSTONEAUTH_SECTIONS) to reach the API.
AGENT_DEFAULT_ENDPOINT = "http://127.0.0.1:6666"
AGENT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "root",
        default="/",
        help="Directory the drivers read sysfs (and /dev) under: / on a real host, a "
        "copy or a fake tree for tests and demonstrations.",
    ),
    cfg.IntOpt(
        "report_interval",
        default=60,
        min=1,
        help="Seconds between two full scans and reports, udev events aside.",
    ),
    cfg.PortOpt(
        "metrics_port",
        default=0,
        help="Serve the agent's Prometheus metrics (tasks, programming phases, bitstream "
        "cache, reports) on this port at /metrics; 0: not served.",
    ),
    cfg.HostAddressOpt(
        "metrics_host", default="127.0.0.1", help="Address the agent's metrics listen on."
    ),
    cfg.URIOpt(
        "api_endpoint",
        schemes=["http", "https"],
        help="Base URL of the Acceleron API the agent reports to (without /v2). Unset: "
        f"{AGENT_DEFAULT_ENDPOINT} (the embedded mode) when no auth_type is set, else the "
        "'accelerator' endpoint of the Keystone catalog.",
    ),
    cfg.FloatOpt(
        "backoff_initial",
        default=1.0,
        min=0.01,
        help="Seconds before the first retry when the API is unreachable or answers 5xx; "
        "each further retry waits about twice as long (with jitter).",
    ),
    cfg.FloatOpt(
        "backoff_max",
        default=60.0,
        min=0.01,
        help="Longest wait, in seconds, between two retries while the API is unreachable.",
    ),
    cfg.BoolOpt(
        "udev",
        default=True,
        help="Also rescan on udev events for PCI and mdev devices (hot plug, VFs, vGPUs), "
        "when pyudev and libudev are available; the periodic scan runs in any case.",
    ),
    cfg.FloatOpt(
        "probe_interval",
        default=1.0,
        min=0.01,
        help="While the task runner backs off from an API that did not answer, seconds "
        "between two cheap checks (GET /v2) of whether it is back: work resumes at the "
        "first answer instead of after the whole backoff.",
    ),
    cfg.StrOpt(
        "task_journal",
        default="$state_path/agent-tasks.json",
        help="Where the agent records the tasks it finished (programming a region, making "
        "a vGPU), so that after a restart it reports them again instead of redoing them.",
    ),
    cfg.StrOpt(
        "cleaning_command",
        help="The command the agent runs for a cleaning of method 'command' ([cleaning] "
        "methods, accel:cleaning), without a shell; exit status 0 means clean. "
        "Placeholders: {address} (the device's PCI address), {deployable} (its key, e.g. "
        "region0), {handles} (the attach handles' addresses, comma-separated), {type} "
        "(the accelerator type). Unset: such a cleaning fails, and the device goes into "
        "maintenance.",
    ),
    cfg.IntOpt(
        "cleaning_timeout",
        default=600,
        min=1,
        help="Seconds cleaning_command (or a driver's reset or scrub) may run.",
    ),
    cfg.FloatOpt(
        "task_wait",
        default=45.0,
        min=0.0,
        max=60.0,
        help="Seconds the API holds the agent's request for work open while it has none: "
        "new work starts at once, without the agent asking over and over. Keep it below "
        "the timeout of any proxy between the agent and the API (often 50 to 60 s).",
    ),
    cfg.FloatOpt(
        "udev_debounce",
        default=2.0,
        min=0.0,
        help="Seconds from a udev event to the rescan it causes; the events of those "
        "seconds make one scan (enabling 16 VFs gives dozens of events).",
    ),
    cfg.FloatOpt(
        "health_event_hold",
        default=600.0,
        min=0.0,
        help="Seconds a device stays in the health state an event called for (a PCIe AER "
        "counter rising, a critical NVIDIA XID) after the last such event; then, with no "
        "new one, it is healthy again. States the hardware holds (a QAT device down, an "
        "FPGA error register set) last as long as the hardware shows them.",
    ),
]
# Sections that say how Acceleron reaches a service through keystoneauth: its
# session options (TLS, timeout), auth options (auth_type and that plugin's own,
# e.g. auth_url, username, password) and adapter options (service_type,
# valid_interfaces, region_name, endpoint_override), named as in every OpenStack
# service. A service without Keystone is reached with auth_type = none and
# endpoint_override. Each entry holds the section's defaults.
KEYSTONEAUTH_SECTIONS: dict[str, dict[str, object]] = {
    "agent": {  # the agent reaching the Acceleron API
        "service_type": "accelerator",
        "valid_interfaces": ["internal", "public"],
        "timeout": 30,
    },
    "placement": {
        "service_type": "placement",
        "valid_interfaces": ["internal", "public"],
        "timeout": 60,  # no wait without an end (a socket read, not a whole transfer)
    },
    "glance": {
        "service_type": "image",
        "valid_interfaces": ["internal", "public"],
        "timeout": 60,
    },
    "nova": {"service_type": "compute", "valid_interfaces": ["internal", "public"]},
}

BINDING_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "bind_timeout",
        default=300,
        min=10,
        help="Seconds a bind may take (programming a region included) before it is failed "
        "and its attach handle freed.",
    ),
    cfg.IntOpt(
        "reap_interval",
        default=30,
        min=1,
        help="Seconds between two looks for binds that outlived bind_timeout.",
    ),
]

# Server-side claims (docs/claims.md).
CLAIM_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "timeout",
        default=300,
        min=10,
        help="Seconds a claim may take to be made, in the database's time. Past it, a claim "
        "still being made is given up: its own maker can no longer move it on, and a DELETE, "
        "the reconciler or a restarted API ends it (requests deleted, handles freed, its "
        "Placement allocation dropped). Whoever makes or ends a claim holds a lease on it, "
        "renewed at each step, of 20 s (or this, if less): a claim whose maker or ender "
        "stopped (a killed API) is ended once that lease has passed. Keep it longer than "
        "any claim takes.",
    ),
]

# The reconciler of Placement allocations and accelerator requests (docs/reconciler.md).
RECONCILER_OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "interval",
        default=300,
        min=0,
        max=3600,
        help="Seconds in which the passes that look for Placement allocations of "
        "Acceleron's resources no request holds, and requests holding handles for "
        "consumers without allocations, read every host once: a pass every 5 s or so, "
        "each over a slice of the hosts. 0: no passes (POST /v2/placement/reconcile and "
        "'acceleron placement reconcile' still run one, over every host).",
    ),
    cfg.IntOpt(
        "grace",
        default=600,
        min=0,
        help="Seconds a leak must last, over two passes at least, before it is freed: "
        "longer than a boot or a claim takes from its allocation to its bind. A leak is "
        "freed at the latest grace + 2 * interval seconds after it appears.",
    ),
    cfg.BoolOpt(
        "free",
        default=True,
        help="Free what the passes find (take Acceleron's part out of the allocation; "
        "unbind the request). False: only log it, as a warning.",
    ),
]

PLACEMENT_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "mode",
        default="disabled",
        choices=[
            (
                "remote",
                "Publish to the cloud's Placement, reached with this section's "
                "keystoneauth options. Compute node providers must exist (Nova makes them).",
            ),
            (
                "embedded",
                "Run the real Placement inside the API process (all-in-one), its "
                "database at embedded_connection; compute node providers are created.",
            ),
            ("disabled", "Do not publish: the inventory is kept, nothing is scheduled."),
        ],
        help="Where Acceleron publishes its inventory.",
    ),
    cfg.StrOpt(
        "embedded_connection",
        default="sqlite:///$state_path/placement.sqlite",
        secret=True,
        help="Database of the embedded Placement (mode = embedded).",
    ),
    cfg.IntOpt(
        "embedded_max_candidates",
        default=100,
        min=-1,
        help="The embedded Placement's [placement] max_allocation_candidates: it stops "
        "building allocation candidates at this many (-1: no cap). Without a cap, a request "
        "for N FPGA regions of an 8-card host as N groups of one makes Placement build 8^N "
        "combinations (8 groups: no answer in 300 s). A candidates query's limit still "
        "applies; Nova then weighs at most this many hosts (docs/placement.md).",
    ),
    cfg.StrOpt(
        "embedded_candidate_strategy",
        default="breadth-first",
        choices=[
            ("breadth-first", "Candidates from every matching host in turn."),
            ("depth-first", "Every candidate of one host before the next (Placement's default)."),
        ],
        help="The embedded Placement's [placement] allocation_candidates_generation_strategy: "
        "with a cap, breadth-first keeps candidates from many hosts rather than the first "
        "few hosts' orderings of the same devices.",
    ),
    cfg.BoolOpt(
        "embedded_wide_trees",
        default=True,
        help="The embedded Placement's [workarounds] optimize_for_wide_provider_trees: "
        "combinations over a provider's capacity are dropped while they are built.",
    ),
    cfg.BoolOpt(
        "nested",
        default=True,
        help="One provider per device and per region under the compute node (spec 001). "
        "False puts every inventory and trait on the compute node provider itself; "
        "'acceleron placement migrate-to-nested' moves a cloud from that to nested.",
    ),
    cfg.StrOpt(
        "pools",
        default="auto",
        choices=[
            (
                "auto",
                "Pools once this release's contract phase is applied ('acceleron db upgrade "
                "--contract', which the previous release refuses to run beside): no API of "
                "the previous release publishes per-device providers in turn.",
            ),
            ("true", "Pools now (a new cloud, or one whose APIs all run this release)."),
            ("false", "One provider per device and per deployable, as before."),
        ],
        help="Nested mode: publish a host's identical accelerators (whole GPUs of one model, "
        "MIG profiles or vGPU types of identical GPUs, VF pools of identical cards) as one "
        "provider with inventory N, from which the bind picks the devices by topology "
        "(docs/placement.md). FPGA regions keep a provider each. Ignored in flat mode.",
    ),
    cfg.BoolOpt(
        "standard_resource_classes",
        default=False,
        help="Publish FPGA, PGPU and VGPU instead of CUSTOM_ACCELERATOR_FPGA, "
        "CUSTOM_ACCELERATOR_GPU and CUSTOM_ACCELERATOR_VGPU, for clouds whose flavors "
        "and device profiles already ask for those.",
    ),
    cfg.DictOpt(
        "functionality",
        default={},
        help="Functionality traits (CUSTOM_<TYPE>_COMPUTE, _NETWORK or _STORAGE) by device "
        "model or region type, e.g. PAC_ARRIA10:COMPUTE,9926ab6d6c925a68aabca7d84c545738:"
        "NETWORK. Keys match in any case, with spaces or hyphens for underscores; a region "
        "type UUID matches with or without hyphens. With Placement enabled, the API refuses to "
        "start on any other value than COMPUTE, NETWORK or STORAGE.",
    ),
    cfg.IntOpt(
        "sync_interval",
        default=60,
        min=1,
        help="Seconds between two passes over the hosts whose inventory changed (a changed "
        "report also starts one at once).",
    ),
    cfg.IntOpt(
        "sync_threads",
        default=4,
        min=1,
        max=64,
        help="Hosts each API process publishes at once in a pass over the changed ones (a "
        "thread and a Placement client each). A host's first publication spends most of "
        "its time waiting on Placement's answers: more threads publish a new region sooner, "
        "up to what Placement's and the database's cores allow.",
    ),
    cfg.IntOpt(
        "sync_lease",
        default=60,
        min=5,
        help="Seconds an API process holds a host it publishes to Placement: another "
        "process leaves the host to it meanwhile. A process that stopped mid-sync (killed, "
        "its machine lost) leaves its hosts unpublished for up to this long. Keep it far "
        "above one host's sync (well under a second, seconds with a Placement under load).",
    ),
    cfg.IntOpt(
        "retired_provider_delay",
        default=900,
        min=0,
        help="Seconds a provider Acceleron no longer wants is kept, fully reserved and "
        "moved out of its compute node's tree, before a later pass deletes it. Nova's "
        "compute service reads allocations of every provider it cached under its compute "
        "node at each build, and fails the build (ResourceProviderAllocationRetrievalFailed) "
        "for one deleted since; it drops one moved out of the tree at its next refresh "
        "([compute] resource_provider_association_refresh, 300 s by default). Keep this "
        "above that refresh. A provider still allocated is kept in the tree, reserved, "
        "until it is not.",
    ),
    cfg.IntOpt(
        "verify_interval",
        default=600,
        min=0,
        help="Seconds in which every host's providers are verified against Placement once "
        "(0: never), which repairs what was changed there behind Acceleron's back, when "
        "[reconciler] interval = 0. The verification is spread over the interval: every "
        "few seconds the sync checks a slice of the hosts, each with one small GET of its "
        "tree, and checks in full only a host one of whose providers is gone, under "
        "another parent or at another generation than the sync recorded. With the "
        "reconciler's passes on, they verify each host from the tree they read of it, "
        "once every [reconciler] interval, unless this is 0.",
    ),
]

QUOTA_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "driver",
        default="config",
        choices=[
            (
                "config",
                "Limits from this section (limits, project_limits); a resource class "
                "without one is unlimited.",
            ),
            (
                "unified_limits",
                "Keystone's unified limits, read through oslo.limit with the [oslo_limit] "
                "options (Nova's and Glance's convention): a resource class without a "
                "registered or project limit gets none (limit 0).",
            ),
        ],
        help="Where each project's limits per accelerator resource class come from. "
        "Resource names are class:<RESOURCE_CLASS>, e.g. class:CUSTOM_ACCELERATOR_FPGA.",
    ),
    cfg.ListOpt(
        "limits",
        default=[],
        help="driver = config: every project's limits, as class:<RESOURCE_CLASS>=<count> "
        "items, e.g. class:CUSTOM_ACCELERATOR_FPGA=4,class:CUSTOM_ACCELERATOR_VGPU=16. "
        "-1 means unlimited.",
    ),
    cfg.ListOpt(
        "project_limits",
        default=[],
        help="driver = config: limits of single projects, overriding `limits` for them, as "
        "<project_id>/class:<RESOURCE_CLASS>=<count> items, e.g. "
        "3f2a.../class:CUSTOM_ACCELERATOR_FPGA=8.",
    ),
]

METRICS_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="Serve Prometheus metrics at GET /metrics on the API's port (no token asked: "
        "restrict it where the API is published, if need be).",
    ),
    cfg.IntOpt(
        "refresh_interval",
        default=15,
        min=1,
        help="Seconds between two refreshes of the state gauges (requests by state, "
        "devices, regions, handles, sync lag, report age) from the database; a scrape "
        "never queries the database.",
    ),
]

CLEANING_METHODS = ("none", "reset", "scrub", "command")
CLEANING_OPTS: list[cfg.Opt] = [
    cfg.DictOpt(
        "methods",
        default={"GPU": "reset", "VGPU": "none", "MIG": "scrub", "FPGA": "scrub"},
        help="API: how a device is cleaned once a tenant gives it back, by accelerator "
        "type (GPU, VGPU, MIG, FPGA, QAT, NIC, ... as deployables show it), before the next "
        "tenant gets it: none; reset (a whole GPU's or a VF's function-level reset); scrub "
        "(a GPU's or MIG slice's memory cleared; an FPGA region loaded with the blank "
        "image for its region type); command (the agent's [agent] cleaning_command). A "
        "device profile group may choose another with accel:cleaning. Types not listed "
        "take default_method. docs/cleaning.md.",
    ),
    cfg.StrOpt(
        "default_method",
        default="reset",
        choices=CLEANING_METHODS,
        help="API: the cleaning of accelerator types that methods does not list.",
    ),
    cfg.IntOpt(
        "timeout",
        default=600,
        min=1,
        help="API: seconds a cleaning may take before it counts as failed (its agent gone, "
        "say): the device or region then goes into maintenance, reserved.",
    ),
    cfg.StrOpt(
        "blank_bitstream_name",
        default="blank",
        help="API: the name of the public bitstreams that hold each region type's blank "
        "image: an FPGA region scrubbed between tenants is loaded with the newest public "
        "bitstream of this name built for its region type (none: the driver must clear "
        "the region itself, or the cleaning fails).",
    ),
    cfg.IntOpt(
        "history_days",
        default=90,
        min=1,
        help="API: days a device's tenancies are kept in its history (GET "
        "/v2/devices/{uuid}/history) after they ended.",
    ),
]

FAKE_DRIVER_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "inventory_file",
        help="YAML file describing the simulated devices of the fake driver. Unset: a "
        "built-in inventory (two FPGAs, two GPUs, one QAT).",
    ),
    cfg.StrOpt(
        "state_file",
        default="$state_path/fake-driver-state.json",
        help="Where the fake driver records what was programmed into its regions, so "
        "that a restart keeps it.",
    ),
    cfg.FloatOpt(
        "program_seconds",
        default=0.0,
        min=0.0,
        help="Seconds programming a region takes, to simulate a card's (loading a "
        "partial bitstream into an Intel PAC takes a few seconds).",
    ),
    cfg.FloatOpt(
        "cleaning_seconds",
        default=0.0,
        min=0.0,
        help="Seconds a cleaning (reset, scrub) takes, to simulate a card's.",
    ),
    cfg.ListOpt(
        "failing_cleanings",
        default=[],
        help="PCI addresses of simulated devices whose cleaning fails (to try the way a "
        "device goes into maintenance); '*' for all.",
    ),
]

PCI_DRIVER_OPTS: list[cfg.Opt] = [
    cfg.MultiStrOpt(
        "device_spec",
        default=[],
        deprecated_opts=[cfg.DeprecatedOpt("passthrough_whitelist", group="pci")],
        help="PCI devices the generic pci driver reports, in Nova's device_spec syntax: "
        "each value a JSON dict or list of dicts with vendor_id, product_id (hex or *), "
        "address (glob string or regex dict) or devname; other keys are tags. "
        "Nothing is reported when unset.",
    ),
]

INTEL_FPGA_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "program_command",
        default="fpgaconf --segment {segment} --bus {bus} --device {device} "
        "--function {function} {image}",
        help="Command that loads a GBS bitstream into a region, run without a shell. "
        "Placeholders: {address} {segment} {bus} {device} {function} {image} {region}.",
    ),
    cfg.IntOpt("program_timeout", default=600, min=1, help="Seconds the program command may run."),
]

XILINX_FPGA_OPTS: list[cfg.Opt] = [
    cfg.StrOpt(
        "program_command",
        default="/opt/xilinx/xrt/bin/xbmgmt program --device {address} --user {image}",
        help="Command that loads an xclbin, run without a shell. {address} is the "
        "management PF. Placeholders: {address} {user_address} {segment} {bus} {device} "
        "{function} {image}.",
    ),
    cfg.IntOpt("program_timeout", default=600, min=1, help="Seconds the program command may run."),
]

NVIDIA_GPU_OPTS: list[cfg.Opt] = [
    cfg.BoolOpt(
        "use_nvml",
        default=True,
        help="Ask NVML (libnvidia-ml) for names, memory, NUMA and MIG; sysfs alone is "
        "used when this is off or the library does not load.",
    ),
    cfg.ListOpt(
        "enabled_vgpu_types",
        default=[],
        help="vGPU types to report (e.g. nvidia-222). Empty: every type the GPUs offer.",
    ),
    cfg.ListOpt(
        "critical_xids",
        item_type=types.Integer(min=0),
        default=[48, 63, 64, 74, 79, 92, 94, 95],
        help="NVIDIA XID errors that make a GPU (or, under MIG, the GPU instance NVML "
        "names) unhealthy: double-bit ECC (48), row remapping or page retirement events "
        "and failures (63, 64), NVLink (74), fallen off the bus (79), high single-bit "
        "ECC rate (92), contained and uncontained ECC errors (94, 95). Others (13, 31, 43: "
        "an application's own faults) do not.",
    ),
    cfg.ListOpt(
        "dynamic_mig",
        default=[],
        help="GPUs carved on demand: PCI addresses (e.g. 0000:3b:00.0), or all. Each such "
        "GPU in MIG mode whose product has a MIG table (H100, H200) is reported as one "
        "partitionable GPU: its MIG instances are made at bind where the planner puts "
        "them and destroyed at release (docs/mig.md). Others are reported as before, with "
        "a warning. Empty: none.",
    ),
    cfg.ListOpt(
        "dynamic_mig_vgpu",
        default=[],
        help="Of the GPUs carved on demand (dynamic_mig), those whose slices go to VMs: "
        "PCI addresses, or all. Each slot of such a GPU is one of its SR-IOV virtual "
        "functions (enable them: sriov_numvfs), and a bind makes the GPU instance, then "
        "gives the virtual function the MIG-backed vGPU type of the instance's profile "
        "(NVIDIA's vGPU manager): Nova attaches the virtual function. Empty: none, the "
        "slices go to containers and jobs (their MIG uuid).",
    ),
    cfg.StrOpt(
        "mig_slots_file",
        default="$state_path/nvidia-mig-slots.json",
        help="Where the NVIDIA driver records which slot of a GPU carved on demand holds "
        "which GPU instance, so that a restart finds them in their slots.",
    ),
]

_OPTS: list[tuple[str | None, list[cfg.Opt]]] = [
    (None, DEFAULT_OPTS),
    ("api", API_OPTS),
    ("oslo_middleware", OSLO_MIDDLEWARE_OPTS),
    ("database", DATABASE_OPTS),
    ("device_profiles", PROFILE_OPTS),
    ("bitstreams", BITSTREAM_OPTS),
    ("agent", AGENT_DRIVER_OPTS),
    ("agent", AGENT_OPTS),
    ("fake", FAKE_DRIVER_OPTS),
    ("pci", PCI_DRIVER_OPTS),
    ("intel_fpga", INTEL_FPGA_OPTS),
    ("xilinx_fpga", XILINX_FPGA_OPTS),
    ("nvidia_gpu", NVIDIA_GPU_OPTS),
    ("placement", PLACEMENT_OPTS),
    ("binding", BINDING_OPTS),
    ("claims", CLAIM_OPTS),
    ("reconciler", RECONCILER_OPTS),
    ("quota", QUOTA_OPTS),
    ("cleaning", CLEANING_OPTS),
    ("metrics", METRICS_OPTS),
]


def list_opts() -> list[tuple[str | None, list[cfg.Opt]]]:
    """Options of every group, for oslo-config-generator and the sample file."""
    merged: dict[str | None, list[cfg.Opt]] = {}
    for group, opts in _OPTS:
        merged.setdefault(group, []).extend(opts)
    for group in KEYSTONEAUTH_SECTIONS:
        merged.setdefault(group, []).extend(keystoneauth_opts(group))
    return list(merged.items())


def register_opts(conf: cfg.ConfigOpts) -> None:
    for group, opts in _OPTS:
        conf.register_opts(opts, group=group)
    _log_defaults()
    oslo_log.register_options(conf)
    for group in KEYSTONEAUTH_SECTIONS:
        register_keystoneauth(conf, group)


def register_keystoneauth(conf: cfg.ConfigOpts, group: str) -> None:
    """keystoneauth's session, auth and adapter options in ``[group]``; safe to call again
    (after the files are read, so that ``auth_section`` can name another section)."""
    ks_loading.register_session_conf_options(conf, group)
    ks_loading.register_auth_conf_options(conf, group)
    ks_loading.register_adapter_conf_options(conf, group, include_deprecated=False)
    for name, value in KEYSTONEAUTH_SECTIONS[group].items():
        conf.set_default(name, value, group=group)


def keystoneauth_opts(group: str) -> list[cfg.Opt]:
    """The keystoneauth options of ``[group]`` for the sample (the password plugin's as
    an example of an auth plugin's own options)."""
    opts = (
        ks_loading.get_session_conf_options()
        + ks_loading.get_auth_common_conf_options()
        + ks_loading.get_auth_plugin_conf_options("password")
        + ks_loading.get_adapter_conf_options(include_deprecated=False)
    )
    cfg.set_defaults(opts, **KEYSTONEAUTH_SECTIONS[group])
    return opts


def load_session(conf: cfg.ConfigOpts, group: str) -> tuple[Any, Any]:
    """The keystoneauth (session, auth) that ``[group]`` describes; auth is None when the
    section sets no auth_type."""
    register_keystoneauth(conf, group)
    auth = ks_loading.load_auth_from_conf_options(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group, auth=auth)
    return session, auth


def load(
    args: Sequence[str] = (),
    config_files: Iterable[str] | None = None,
    overrides: dict[str, dict[str, object]] | None = None,
) -> cfg.ConfigOpts:
    """Build a parsed configuration.

    ``config_files=None`` means oslo.config's search path for ``acceleron.conf``
    (``~/.acceleron``, ``~/``, ``/etc/acceleron``, ``/etc``); an empty list means
    no file at all. ``overrides`` maps group (``"DEFAULT"`` for none) to values.
    """
    conf = cfg.ConfigOpts()
    register_opts(conf)
    files = None if config_files is None else list(config_files)
    conf(
        list(args),
        project=PROJECT,
        default_config_files=files,
        default_config_dirs=[] if files is not None else None,
        validate_default_values=True,
    )
    for group, values in (overrides or {}).items():
        for name, value in values.items():
            conf.set_override(name, value, group=None if group == "DEFAULT" else group)
    return conf


# The libraries whose sections an acceleron.conf may hold besides Acceleron's own: the
# sample's (oslo.log's [DEFAULT] options, [keystone_authtoken], [oslo_policy]), and those
# read when a feature asks for them ([oslo_limit] for unified limits, castellan's
# [key_manager] and [barbican] for certificates from a key manager).
LIBRARY_NAMESPACES = (
    "oslo.log",
    "keystonemiddleware.auth_token",
    "oslo.policy",
    "oslo.limit",
    "castellan.config",
)


def known_options() -> dict[str, set[str]]:
    """Every option a section of acceleron.conf may hold, by section (``DEFAULT`` for
    none): Acceleron's and its libraries' (LIBRARY_NAMESPACES); not the options of an
    auth plugin, which depend on the section's ``auth_type``."""
    from importlib.metadata import entry_points

    found: dict[str, set[str]] = {}
    listed: list[tuple[Any, list[cfg.Opt]]] = list(list_opts())
    namespaces = {ep.name: ep for ep in entry_points(group="oslo.config.opts")}
    for namespace in LIBRARY_NAMESPACES:
        if namespace in namespaces:
            listed += namespaces[namespace].load()()
    for group, opts in listed:
        name = getattr(group, "name", group) or "DEFAULT"
        names = found.setdefault(name, set())
        for opt in opts:
            names.add(opt.dest)
            names.update(
                old.name for old in opt.deprecated_opts if old.name and (old.group or name) == name
            )
    return found


def unknown_options(paths: Iterable[str]) -> list[str]:
    """What the configuration files ``paths`` set that nothing reads, each as ``[section]
    option`` (or ``[section]`` for a whole section): a misspelt name, or a section of
    another service's file. oslo.config passes over them in silence. The options of a
    section's auth plugin (``auth_type``) count as known. Raises oslo.config's
    ConfigFileParseError for a file that does not parse."""
    from oslo_config import iniparser

    known = known_options()
    unknown = []
    for path in paths:
        sections: dict[str, dict[str, list[str]]] = {}
        try:
            cfg.ConfigParser(path, sections).parse()
        except iniparser.ParseError as error:
            raise cfg.ConfigFileParseError(path, str(error)) from error
        for section, values in sections.items():
            names = known.get(section)
            if names is None:
                unknown.append(f"[{section}]")
                continue
            auth_type = values.get("auth_type", [None])[-1]
            if auth_type:
                dests: set[str] = {opt.dest for opt in ks_loading.get_auth_common_conf_options()}
                # An unknown plugin: loading the section says so.
                with contextlib.suppress(Exception):
                    dests |= {opt.dest for opt in ks_loading.get_plugin_options(auth_type)}
                names = names | dests
            unknown += [
                f"[{section}] {key}" for key in values if key.replace("-", "_") not in names
            ]
    return unknown


def sample() -> str:
    """The sample configuration file, generated from the registered options."""
    out = io.StringIO()
    gen_conf = cfg.ConfigOpts()
    generator.register_cli_opts(gen_conf)
    _log_defaults()
    namespaces = [PROJECT, "oslo.log", "keystonemiddleware.auth_token", "oslo.policy"]
    gen_conf([arg for ns in namespaces for arg in ("--namespace", ns)] + ["--wrap-width", "79"])
    generator.generate(gen_conf, output_file=out)
    return out.getvalue()
