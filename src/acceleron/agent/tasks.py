"""The agent's work: tasks the API hands this host, done one at a time.

The runner long-polls ``POST /v2/hosts/{host}/tasks/claim`` and executes what it
gets:

* ``program``: **fetch** the bitstream from the API into the host's cache (named by
  its hash; an intact cached copy is not fetched again), **verify** it (its hash,
  for a GBS image that its interface id is the region's type, and where this host
  requires it for the request's project, its signature: ``[bitstreams]
  verify_signatures``), **program** it through the driver, **report** what the
  region now holds;
* ``create_mdev`` / ``remove_mdev``: make or remove the vGPU behind an attach handle;
* ``make_mig`` / ``destroy_mig``: make the MIG instance a slot handle of a GPU carved on
  demand asks for, where the GPU allows, or destroy the one made for it.

Phases and progress go to the API while it works. The end of each task is written
to a journal on disk before it is reported, so an agent restarted in the middle
reports a finished task again instead of doing it twice (a region is never
programmed twice for one task); a task whose end could not be reported stays
running in the API and comes back with the next claim. A task the API no longer
wants (its request was unbound meanwhile) is dropped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from oslo_config import cfg

import acceleron
from acceleron import formats, json_file, metrics
from acceleron.agent.client import (
    ApiUnavailable,
    ApiUnreachable,
    ReportClient,
    ReportError,
    ReportRefused,
)
from acceleron.agent.loop import backoff_delay
from acceleron.bitstreams import certificates, signatures, transfer
from acceleron.bitstreams.model import Bitstream
from acceleron.drivers import command, gbs
from acceleron.drivers.base import Cleanable, Driver, Mediated, Partitionable, Programmable
from acceleron.drivers.errors import CleaningUnsupported, DriverError
from acceleron.drivers.sysfs import normalize_uuid, shared_scan
from acceleron.exceptions import AcceleronError, BitstreamSignatureRefused
from acceleron.vocabulary import AttachHandle, Device, walk

LOG = logging.getLogger(__name__)
PROGRESS_EVERY = 0.5  # seconds between two progress reports of one phase
JOURNAL_KEEP = 500  # finished tasks the journal remembers


class TaskFailed(Exception):
    """The task cannot be done; ``str()`` is the reason the API records."""


class TaskCancelled(Exception):
    """The API no longer wants the task (its request was unbound or deleted)."""


class Journal:
    """The ends of the tasks this host finished, in a small JSON file."""

    def __init__(self, path: Path, keep: int = JOURNAL_KEEP) -> None:
        self.path = path
        self.keep = keep
        self._lock = threading.Lock()

    def get(self, uuid: str) -> dict[str, Any] | None:
        entry: dict[str, Any] | None = self._load().get(uuid)
        return entry

    def put(self, uuid: str, outcome: Mapping[str, Any]) -> None:
        with self._lock:
            entries = self._load()
            entries.pop(uuid, None)
            entries[uuid] = dict(outcome)
            kept = dict(list(entries.items())[-self.keep :])
            json_file.replace(self.path, kept)

    def _load(self) -> dict[str, Any]:
        data = json_file.load(self.path, "task journal")
        return data if isinstance(data, dict) else {}


@dataclasses.dataclass(frozen=True)
class Settings:
    hostname: str
    cache_dir: Path
    journal: Path
    wait: float = 45.0  # seconds the API holds a claim while there is no work
    backoff_initial: float = 1.0
    backoff_max: float = 60.0
    probe_interval: float = 1.0  # seconds between two probes of an API that went away
    signature_policy: signatures.Policy = dataclasses.field(default_factory=signatures.Policy)
    cleaning_command: str | None = None  # [agent] cleaning_command
    cleaning_timeout: float = 600.0

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Settings:
        return cls(
            hostname=conf.host,
            cache_dir=Path(conf.bitstreams.cache_dir),
            journal=Path(conf.agent.task_journal),
            wait=conf.agent.task_wait,
            backoff_initial=conf.agent.backoff_initial,
            backoff_max=max(conf.agent.backoff_max, conf.agent.backoff_initial),
            probe_interval=conf.agent.probe_interval,
            signature_policy=certificates.policy_from_conf(conf),
            cleaning_command=conf.agent.cleaning_command,
            cleaning_timeout=conf.agent.cleaning_timeout,
        )


class TaskRunner:
    """Claims and executes this host's tasks until ``stop()``."""

    def __init__(
        self,
        settings: Settings,
        drivers: Sequence[Driver],
        client: ReportClient,
        rescan: Callable[[], None] = lambda: None,
    ) -> None:
        self.settings = settings
        self.drivers = list(drivers)
        self.client = client
        self.journal = Journal(settings.journal)
        self._rescan = rescan
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                tasks = self.client.claim_tasks(self.settings.hostname, self.settings.wait)
            except ReportError as error:
                delay = self._delay(failures)
                failures += 1
                LOG.warning(
                    "Cannot take tasks (attempt %d): %s. Retrying in %.3g s at the latest.",
                    failures,
                    error,
                    delay,
                )
                self._back_off(delay, error)
                continue
            failures = 0
            for task in tasks:
                if self._stopping.is_set():
                    return
                self.execute(task)

    def _delay(self, attempt: int) -> float:
        s = self.settings
        return backoff_delay(attempt, s.backoff_initial, s.backoff_max, 1.0)

    def _back_off(self, delay: float, error: ReportError) -> None:
        """Wait ``delay`` seconds before trying again. An API that did not answer at all
        is probed meanwhile, every ``probe_interval`` seconds: work resumes as soon as
        it is back, not up to ``backoff_max`` later. (One that answered 5xx is up but
        failing: probing it would only say it is up.)"""
        if not isinstance(error, ApiUnreachable):
            self._stopping.wait(delay)
            return
        deadline = time.monotonic() + delay
        while not self._stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._stopping.wait(min(remaining, self.settings.probe_interval))
            if not self._stopping.is_set() and self.client.probe():
                LOG.info("The API answers again: resuming")
                return

    # --- one task -----------------------------------------------------------------

    def execute(self, task: Mapping[str, Any]) -> None:
        """Do a task (unless the journal says it is done) and report its end."""
        uuid = task["uuid"]
        outcome = self.journal.get(uuid)
        if outcome is None:
            try:
                outcome = self._outcome(task)
            except ApiUnavailable as error:  # e.g. while fetching: the task stays running
                LOG.warning(
                    "Task %s interrupted, the API is away: %s; it comes back with the next claim",
                    uuid,
                    error,
                )
                self._stopping.wait(self._delay(0))
                return
            self.journal.put(uuid, outcome)
        else:
            LOG.info("Task %s was finished before a restart: reporting it again", uuid)
        if outcome["state"] != "cancelled":
            self._report_end(uuid, outcome)
        if outcome["state"] == "done":
            self._rescan()  # the inventory shows what changed

    def _outcome(self, task: Mapping[str, Any]) -> dict[str, Any]:
        kind = task["kind"]
        LOG.info("Task %s: %s on %s", task["uuid"], kind, task["params"].get("pci_address"))
        outcome = self._run(task)
        metrics.AGENT_TASKS.labels(kind, outcome["state"]).inc()
        return outcome

    def _run(self, task: Mapping[str, Any]) -> dict[str, Any]:
        kind = task["kind"]
        try:
            if kind == "program":
                return {"state": "done", "result": self._program(task)}
            if kind in ("create_mdev", "remove_mdev"):
                self._vgpu(task)
                return {"state": "done", "result": {}}
            if kind == "clean":
                return {"state": "done", "result": self._clean(task)}
            if kind in ("make_mig", "destroy_mig"):
                return {"state": "done", "result": self._mig(task)}
            raise TaskFailed(
                f"this agent (release {acceleron.__version__}, task format "
                f"{formats.show(formats.TASK_VERSION)}) does not know tasks of "
                f"kind {kind!r}: upgrade the agent"
            )
        except TaskCancelled:
            LOG.info("Task %s was cancelled", task["uuid"])
            return {"state": "cancelled"}
        except (TaskFailed, AcceleronError, OSError, ReportRefused) as error:
            LOG.error("Task %s (%s) failed: %s", task["uuid"], kind, error)
            return {"state": "failed", "error": str(error)[:4000]}
        except ApiUnavailable:
            raise
        except KeyError as error:  # a parameter the task format of this agent requires
            LOG.error("Task %s (%s) lacks parameter %s", task["uuid"], kind, error)
            return {
                "state": "failed",
                "error": f"the task lacks its parameter {error}: this "
                f"agent reads task format {formats.show(formats.TASK_VERSION)}",
            }
        except Exception as error:  # a driver's bug must fail its task, not stop the agent
            LOG.exception("Task %s (%s) failed unexpectedly", task["uuid"], kind)
            return {"state": "failed", "error": f"unexpected error: {error!r}"[:4000]}

    def _report_end(self, uuid: str, outcome: Mapping[str, Any]) -> None:
        """Report until the API has it (the journal keeps it across a restart)."""
        attempt = 0
        fields = {k: outcome.get(k) for k in ("state", "result", "error")}
        fields["phase"] = "report" if outcome["state"] == "done" else None
        while not self._stopping.is_set():
            try:
                self.client.update_task(uuid, **fields, progress=100)
                return
            except ApiUnavailable as error:
                delay = self._delay(attempt)
                attempt += 1
                LOG.warning(
                    "Cannot report task %s: %s; retrying in %.3g s at the latest",
                    uuid,
                    error,
                    delay,
                )
                self._back_off(delay, error)
            except ReportError as error:
                LOG.error("The API refused the end of task %s: %s", uuid, error)
                return

    def _progress(self, task: Mapping[str, Any], phase: str, progress: int) -> None:
        """Best effort: a progress report that does not arrive is only logged."""
        try:
            if (
                self.client.update_task(
                    task["uuid"], state="running", phase=phase, progress=progress
                )
                is None
            ):
                raise TaskCancelled()
        except ApiUnavailable as error:
            LOG.warning("Progress of task %s not reported: %s", task["uuid"], error)

    # --- programming ------------------------------------------------------------------

    def _program(self, task: Mapping[str, Any]) -> dict[str, Any]:
        params = task["params"]
        bitstream = _bitstream(params["bitstream"])
        self._progress(task, "fetch", 0)  # first: the request shows at once that work began
        driver, device = self._find(params["pci_address"])
        if not isinstance(driver, Programmable):
            raise TaskFailed(f"driver {driver.name} cannot program {device.pci_address}")
        phases = _Phases()
        with phases.timed("fetch"):
            path = self._fetch(task, bitstream)
        with phases.timed("verify"):
            self._progress(task, "verify", 0)
            functions = _verify(path, bitstream, params.get("region_type"))
            signature = self._check_signature(params, bitstream, path)
        function = functions[0] if functions else normalize_uuid(bitstream.function_uuid)
        with phases.timed("program"):
            self._progress(task, "program", 0)
            if _holds_these_bytes(device, params["deployable"], bitstream):
                LOG.info(
                    "%s %s holds these very bytes already: not programmed again",
                    device.pci_address,
                    params["deployable"],
                )
            else:
                driver.program(device, params["deployable"], path)
                LOG.info(
                    "Programmed %s into %s %s in %.1f s",
                    bitstream.describe(),
                    device.pci_address,
                    params["deployable"],
                    time.monotonic() - phases.started,
                )
        # The API observes them too (acceleron_programming_phase_duration_seconds).
        return {
            "bitstream_id": bitstream.id,
            "function_uuid": function,
            "functions": list(functions) or ([function] if function else []),
            "signature": signature,
            "phase_seconds": phases.seconds,
        }

    def _check_signature(
        self, params: Mapping[str, Any], bitstream: Bitstream, path: Path
    ) -> dict[str, Any]:
        """Check the signature of the bytes at ``path`` (just verified against their
        checksum, its name) where the bitstream carries one or this host requires one
        for the request's project; refuse a bitstream that requirement is not met for.
        What was found, for the region's provenance."""
        policy = self.settings.signature_policy
        required = policy.required_for(params.get("project_id"))
        if not required and not signatures.fields(bitstream.properties):
            return {"verified": False, "reason": signatures.UNSIGNED}
        marks = self.settings.cache_dir / ".signatures"
        try:
            signatures.check(path, path.name, bitstream.properties, policy, marks)
        except BitstreamSignatureRefused as refused:
            if required:
                raise TaskFailed(f"bitstream {bitstream.describe()}: {refused}") from refused
            LOG.info("Bitstream %s: %s (not required here)", bitstream.describe(), refused)
            return {"verified": False, "reason": refused.reason}
        LOG.info("Bitstream %s: signature verified", bitstream.describe())
        certificate = bitstream.properties.get(signatures.CERTIFICATE_KEY)
        return {"verified": True, "certificate_id": certificate}

    def _fetch(self, task: Mapping[str, Any], bitstream: Bitstream) -> Path:
        def progress(percent: int) -> None:
            self._progress(task, "fetch", percent)

        def chunks() -> contextlib.AbstractContextManager[Iterator[bytes]]:
            return _counted(self.client.bitstream_chunks(bitstream.id), bitstream.size, progress)

        return transfer.fetch_to_cache(chunks, bitstream, self.settings.cache_dir)

    # --- cleaning between tenants ------------------------------------------------------

    def _clean(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """Clean what a tenant gave back, as the API chose: reset, scrub (a region with
        its blank image, fetched and verified as a program's bitstream is) or the
        operator's command. Failing fails the task: the API keeps it reserved."""
        params = task["params"]
        method, key, handles = params["method"], params["deployable"], params["handles"]
        self._progress(task, "clean", 0)
        driver, device = self._find(params["pci_address"])
        image, blank = None, params.get("blank")
        functions: tuple[str, ...] = ()
        if blank:
            bitstream = _bitstream(blank)
            image = self._fetch(task, bitstream)
            functions = _verify(image, bitstream, params.get("region_type"))
        started = time.monotonic()
        if method == "command":
            self._command(params)
        elif isinstance(driver, Cleanable):
            try:
                driver.clean(device, key, tuple(handles), method, image)
            except CleaningUnsupported as error:
                raise TaskFailed(f"{driver.name} cannot clean this way: {error}") from error
        else:
            raise TaskFailed(f"driver {driver.name} cleans nothing: choose none or command")
        LOG.info(
            "Cleaned %s %s (%s) in %.1f s",
            device.pci_address,
            key,
            method,
            time.monotonic() - started,
        )
        return {
            "method": method,
            "bitstream_id": blank["id"] if blank else None,
            "functions": list(functions),
        }

    def _command(self, params: Mapping[str, Any]) -> None:
        template = self.settings.cleaning_command
        if not template:
            raise TaskFailed("the cleaning is a command, but [agent] cleaning_command is unset")
        values = {
            "address": params["pci_address"],
            "deployable": params["deployable"],
            "handles": ",".join(params["handles"]),
            "type": str(params.get("accelerator_type") or ""),
        }
        try:
            command.run(template, values, self.settings.cleaning_timeout, "cleaning command")
        except DriverError as error:
            raise TaskFailed(str(error)) from error

    # --- vGPUs ------------------------------------------------------------------------

    def _vgpu(self, task: Mapping[str, Any]) -> None:
        driver, device, handle = self._target(task["params"], Mediated, "makes no vGPUs")
        assert isinstance(driver, Mediated)
        if task["kind"] == "create_mdev":
            driver.create_mdev(device, handle)
        else:
            driver.remove_mdev(device, handle)

    # --- MIG instances -----------------------------------------------------------------

    def _mig(self, task: Mapping[str, Any]) -> dict[str, Any]:
        """Make the instance a slot asks for, where the GPU allows (the driver reads the
        GPU's instances and asks the planner), or destroy the one made for it."""
        params = task["params"]
        driver, device, handle = self._target(params, Partitionable, "carves no GPU")
        assert isinstance(driver, Partitionable)
        if task["kind"] == "destroy_mig":
            driver.destroy_mig_instance(device, handle)
            LOG.info(
                "Destroyed the MIG instance of slot %s on %s", handle.address, device.pci_address
            )
            return {}
        made = dict(driver.make_mig_instance(device, handle, params["profile"]))
        LOG.info("Made MIG instance %s on %s", made, device.pci_address)
        return {"instance": made}

    # --- looking things up ------------------------------------------------------------

    def _target(
        self, params: Mapping[str, Any], able: type, refusal: str
    ) -> tuple[Driver, Device, AttachHandle]:
        """The driver, device and attach handle a vGPU or MIG task names (``mdev_uuid``
        or ``slot``); TaskFailed when the driver is not ``able``: it ``refusal``."""
        driver, device = self._find(params["pci_address"])
        if not isinstance(driver, able):
            raise TaskFailed(f"driver {driver.name} {refusal} on {device.pci_address}")
        address = params.get("slot") or params["mdev_uuid"]
        return driver, device, _handle(device, params["deployable"], address)

    def _find(self, pci_address: str) -> tuple[Driver, Device]:
        """The driver that reports the device at ``pci_address``, and the device now."""
        with shared_scan():
            for driver in self.drivers:
                for device in driver.discover():
                    if device.pci_address == pci_address:
                        return driver, device
        raise TaskFailed(f"no driver of this agent reports a device at {pci_address}")


class _Phases:
    """The seconds each phase of a program task took, observed as each ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.started = 0.0

    @contextlib.contextmanager
    def timed(self, phase: str) -> Iterator[None]:
        self.started = time.monotonic()
        yield
        self.seconds[phase] = round(time.monotonic() - self.started, 6)
        metrics.AGENT_PHASE_SECONDS.labels(phase).observe(self.seconds[phase])


def _holds_these_bytes(device: Device, key: str, bitstream: Bitstream) -> bool:
    """Whether the driver says the region holds an image of exactly these bytes (its
    ``bitstream_sha256`` attribute; a region holding the same function from other bytes
    is programmed all the same: what it holds may have come from anywhere)."""
    if (bitstream.hash_algo or "").lower() != "sha256" or not bitstream.hash_value:
        return False
    for dep in walk(device.deployables):
        if dep.key == key:
            held = dep.attributes.get("bitstream_sha256")
            return isinstance(held, str) and held.lower() == bitstream.hash_value.lower()
    raise TaskFailed(f"{device.pci_address} has no region {key!r} any more")


def _handle(device: Device, key: str, address: str) -> AttachHandle:
    for dep in walk(device.deployables):
        if dep.key == key:
            for handle in dep.attach_handles:
                if handle.address == address:
                    return handle
    raise TaskFailed(f"{device.pci_address} has no attach handle {address} under {key!r}")


def _bitstream(params: Mapping[str, Any]) -> Bitstream:
    return Bitstream(
        id=params["id"],
        name=params.get("name") or params["id"],
        size=params.get("size"),
        hash_algo=params.get("hash_algo"),
        hash_value=params.get("hash_value"),
        function_uuid=params.get("function_uuid"),
        region_type_uuid=params.get("region_type_uuid"),
        properties=signatures.fields(params.get("signature") or {}),
    )


def _verify(path: Path, bitstream: Bitstream, region_type: str | None) -> tuple[str, ...]:
    """Check the cached copy once more, and a GBS image's interface against the region
    type; the functions its header names (none for other formats)."""
    if not transfer.file_is_intact(path, bitstream):
        raise TaskFailed(f"the cached copy of {bitstream.describe()} does not match its hash")
    if not gbs.has_header(path):
        return ()
    header = gbs.read_header(path)
    wanted = normalize_uuid(region_type)
    if wanted is not None and header.interface_uuid != wanted:
        raise TaskFailed(
            f"bitstream {bitstream.describe()} is built for interface {header.interface_uuid}, "
            f"but the region's type is {wanted}"
        )
    return header.accelerator_type_uuids


@contextlib.contextmanager
def _counted(
    source: contextlib.AbstractContextManager[Iterator[bytes]],
    size: int | None,
    report: Callable[[int], None],
) -> Iterator[Iterator[bytes]]:
    """The API's chunks, with the share of ``size`` received reported as they pass."""
    with source as chunks:
        yield _count(chunks, size or 0, report)


def _count(chunks: Iterable[bytes], size: int, report: Callable[[int], None]) -> Iterator[bytes]:
    done, last = 0, time.monotonic()
    for chunk in chunks:
        done += len(chunk)
        now = time.monotonic()
        if size and now - last >= PROGRESS_EVERY:
            report(min(99, done * 100 // size))
            last = now
        yield chunk
