"""Prometheus metrics: what the API (``GET /metrics``) and the agents expose.

Every metric lives here, so that docs/metrics.md and the Grafana dashboard
(docs/grafana/acceleron.json) have one list to follow. Two kinds:

* **counters and histograms**, moved by the code that does the work: requests
  answered, binds ended, programming phases, Placement calls, bitstream cache
  look-ups. Each process counts what it did;
* **gauges of state** (requests by state, devices, regions and handles, Placement
  sync lag, agents' report age), set from a few ``GROUP BY`` queries every
  ``[metrics] refresh_interval`` seconds by the API's refresher, not per scrape.

A scrape only reads these values: it never touches the database.

With several worker processes (``[api] workers``), each writes its values to files
in ``PROMETHEUS_MULTIPROC_DIR`` (``acceleron api`` makes one) and a scrape of any
worker adds up the counters and histograms of all and takes the most recent value
of each gauge (prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST
# Seconds: an API answer, a bind (which may program a region: minutes), a phase.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
LONG_BUCKETS = (0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)

# --- the API ---------------------------------------------------------------------------

REQUESTS = Counter(
    "acceleron_api_requests",
    "API requests answered, by route template, method and status.",
    ["route", "method", "status"],
)
REQUEST_SECONDS = Histogram(
    "acceleron_api_request_duration_seconds",
    "Time to answer an API request, by route template and method.",
    ["route", "method"],
    buckets=REQUEST_BUCKETS,
)
BIND_SECONDS = Histogram(
    "acceleron_bind_duration_seconds",
    "Time from a bind's start to its end (outcome: bound or failed), programming and "
    "vGPU creation included.",
    ["outcome"],
    buckets=LONG_BUCKETS,
)
PLACEMENT_REQUESTS = Counter(
    "acceleron_placement_requests",
    "Requests sent to Placement, by method and kind (the path without ids).",
    ["method", "kind"],
)
PLACEMENT_ERRORS = Counter(
    "acceleron_placement_errors",
    "Placement requests that failed, by kind and error (unreachable, server_error, "
    "conflict, not_found, refused).",
    ["kind", "error"],
)
ALLOCATION_WRITES = Counter(
    "acceleron_placement_allocation_writes",
    "Consumers' allocation writes of claims and their releases, by how they reached "
    "Placement: batched (with others in one POST /allocations), alone (a PUT: nothing "
    "else to send), refused (a PUT after the batch it was in was refused).",
    ["how"],
)
CLAIM_CONFLICTS = Counter(
    "acceleron_claim_allocation_conflicts",
    "Claims' allocations Placement refused (409: the capacity taken meanwhile) and chosen "
    "again, by where the refused choice came from: view (Acceleron's own view of the "
    "hosts) or candidates (Placement's candidate query).",
    ["chosen"],
)
for _how in ("batched", "alone", "refused"):  # shown at 0 before the first
    ALLOCATION_WRITES.labels(_how)
for _chosen in ("view", "candidates"):
    CLAIM_CONFLICTS.labels(_chosen)
DB_RETRIES = Counter(
    "acceleron_db_retries",
    "Write transactions run again after the database rolled them back, by reason: deadlock, "
    "lock_wait_timeout, serialization (PostgreSQL), certification (a Galera node's write "
    "conflicting with one certified first on another node).",
    ["reason"],
)

# State, refreshed from the database every [metrics] refresh_interval seconds.
ARQS = Gauge(
    "acceleron_arqs",
    "Accelerator requests by state.",
    ["state"],
    multiprocess_mode="mostrecent",
)
DEVICES = Gauge(
    "acceleron_devices",
    "Devices by type, health, operator status (enabled, maintaining) and state (present, lost).",
    ["type", "health", "status", "state"],
    multiprocess_mode="mostrecent",
)
DEPLOYABLES = Gauge(
    "acceleron_deployables",
    "Deployables (regions, VF pools, vGPU types, MIG profiles) by kind, device type "
    "and availability (available, allocated).",
    ["kind", "type", "availability"],
    multiprocess_mode="mostrecent",
)
ATTACH_HANDLES = Gauge(
    "acceleron_attach_handles",
    "Attach handles by device type, deployable kind and usage (used: held by a request "
    "or by the host itself).",
    ["type", "kind", "usage"],
    multiprocess_mode="mostrecent",
)
PLACEMENT_HOSTS_UNSYNCED = Gauge(
    "acceleron_placement_hosts_unsynced",
    "Hosts whose latest inventory Placement does not show yet.",
    multiprocess_mode="mostrecent",
)
PLACEMENT_SYNC_LAG = Gauge(
    "acceleron_placement_sync_lag_seconds",
    "How long the oldest unsynced host change has waited for Placement (0: none).",
    multiprocess_mode="mostrecent",
)
AGENT_REPORT_AGE = Gauge(
    "acceleron_agent_report_age_seconds",
    "Seconds since each host's agent last reported (as of the last refresh).",
    ["host"],
    multiprocess_mode="mostrecent",
)
AGENT_LAST_REPORT = Gauge(
    "acceleron_agent_last_report_timestamp_seconds",
    "When each host's agent last reported (Unix time).",
    ["host"],
    multiprocess_mode="mostrecent",
)
REFRESH_SECONDS = Gauge(
    "acceleron_metrics_refresh_duration_seconds",
    "Time the last refresh of the state gauges took (its database queries).",
    multiprocess_mode="mostrecent",
)

PROGRAM_PHASE_SECONDS = Histogram(
    "acceleron_programming_phase_duration_seconds",
    "Time program tasks spent in each phase (fetch, verify, program), as every host's "
    "agent reported it with the task's end.",
    ["phase"],
    buckets=LONG_BUCKETS,
)
CLEANING_SECONDS = Histogram(
    "acceleron_cleaning_duration_seconds",
    "Time a device, region or handle took to be cleaned between tenants, from the clean "
    "task's creation to its end, by method (reset, scrub, command) and outcome (done, "
    "failed).",
    ["method", "outcome"],
    buckets=LONG_BUCKETS,
)

# --- the agent ---------------------------------------------------------------------------

BITSTREAM_CACHE = Counter(
    "acceleron_bitstream_cache_lookups",
    "Bitstream look-ups in a host's cache: hit (an intact copy), miss (fetched), "
    "damaged (a copy whose hash no longer matched, fetched again).",
    ["result"],
)
BITSTREAM_SIGNATURES = Counter(
    "acceleron_bitstream_signature_checks",
    "Signature checks of bitstreams an agent was to program: valid (verified over the "
    "bytes), valid_remembered (the same bytes verified before), or the reason it was "
    "refused (unsigned, bad_signature, unknown_certificate, untrusted_certificate, "
    "expired_certificate, unsupported_algorithm, unsuitable_certificate, weak_key).",
    ["result"],
)
AGENT_PHASE_SECONDS = Histogram(
    "acceleron_agent_programming_phase_duration_seconds",
    "Time this agent's program tasks spent in each phase (fetch, verify, program).",
    ["phase"],
    buckets=LONG_BUCKETS,
)
AGENT_TASKS = Counter(
    "acceleron_agent_tasks",
    "Tasks an agent ran, by kind and outcome (done, failed, cancelled).",
    ["kind", "outcome"],
)
AGENT_REPORTS = Counter(
    "acceleron_agent_reports",
    "Host reports an agent sent, by outcome (sent, failed).",
    ["outcome"],
)


def exposition() -> bytes:
    """The text a scrape answers: this process's values, or every worker's when the
    server runs several (multiprocess mode)."""
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry)
    return generate_latest(REGISTRY)


_ID = re.compile(r"^[0-9a-fA-F-]{32,36}$")


def placement_kind(path: str) -> str:
    """``/resource_providers/{uuid}/inventories/CUSTOM_X?..`` -> ``resource_providers/
    inventories``: the collection and sub-collection, without ids or names."""
    parts = [p for p in path.split("?", 1)[0].split("/") if p]
    return "/".join(parts[0:1] + parts[2:3]) or "/"


def set_counts(gauge: Gauge, counts: Mapping[tuple[str, ...], float]) -> None:
    """A gauge's label sets made exactly ``counts`` (those gone are removed)."""
    for labels in _label_sets(gauge) - set(counts):
        gauge.remove(*labels)
    for labels, value in counts.items():
        gauge.labels(*labels).set(value)


def _label_sets(gauge: Gauge) -> set[tuple[str, ...]]:
    """The label values of each child the gauge has (its samples, as a scrape sees them:
    a gauge's sample holds its labels in the gauge's order)."""
    return {
        tuple(sample.labels.values()) for family in gauge.collect() for sample in family.samples
    }
