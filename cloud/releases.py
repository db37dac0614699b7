"""The previous release of Acceleron, for the rolling upgrade (``make e2e-upgrade``): its
files and its own virtualenv, and the upgrade's steps run on the cloud."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request

from cloud.base import (
    HOME,
    REPO,
    RUN,
    VENVS,
    VERSION_FILE,
    WAIT,
    Cloud,
    CloudError,
    answers,
    log,
    run,
    uv,
    wait_for,
)


def git(*argv: str) -> str:
    return run(["git", "-C", str(REPO), *argv], what=f"git {argv[0]}")


def version_of(text: str) -> str:
    for line in text.splitlines():
        if line.startswith("__version__ = "):
            return line.split("=", 1)[1].strip().strip("\"'")
    raise CloudError(f"no __version__ in {VERSION_FILE}")


def previous_release() -> str:
    """The commit of the newest release older than the checkout: the last commit whose
    ``__version__`` names it, i.e. the parent of the commit that moved ``__version__`` on
    to the next ``.dev0`` (CONTRIBUTING.md, "Releases"). Found in the history, not by
    its tag: a fresh clone has no tags."""
    current = version_of((REPO / VERSION_FILE).read_text())
    for line in git("log", "--format=%H %P", "--", VERSION_FILE).splitlines():
        before = [*line.split(), ""][1]  # the commit's (first) parent
        if not before:
            break
        version = version_of(git("show", f"{before}:{VERSION_FILE}"))
        if ".dev" not in version and version != current:
            return before
    raise CloudError("no earlier release in the history (a shallow clone? `git fetch --unshallow`)")


def release_venv(ref: str) -> str:
    """The release at ``ref`` (a commit or tag) installed from its own requirements.lock:
    its files (``git archive``) under releases/<version>/, its virtualenv in
    venvs/acceleron-<version>/ (with uv's shared cache: seconds once cached), made when
    missing. Returns the version."""
    commit = git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    version = version_of(git("show", f"{commit}:{VERSION_FILE}"))
    tree, path = HOME / "releases" / version, VENVS / f"acceleron-{version}"
    stamp = path / ".cloud-stamp"
    digest = hashlib.sha256(f"{commit} {sys.version}".encode()).hexdigest()
    if stamp.exists() and stamp.read_text() == digest:
        return version
    started = time.monotonic()
    for old in (tree, path):
        shutil.rmtree(old, ignore_errors=True)
    tree.mkdir(parents=True)
    archive = tree.with_suffix(".tar")
    git("archive", "--format=tar", "-o", str(archive), commit)
    with tarfile.open(archive) as files:
        files.extractall(tree, filter="data")
    archive.unlink()
    run([uv(), "venv", "-q", "--python", sys.executable, str(path)])
    python = str(path / "bin" / "python")
    lock = str(tree / "requirements.lock")
    run(
        [uv(), "pip", "install", "-q", "--python", python, "-c", lock, str(tree)],
        what=f"installing Acceleron {version}",
    )
    stamp.write_text(digest)
    log(f"Acceleron {version} ({commit[:12]}): installed in {time.monotonic() - started:.1f} s")
    return version


def acceleron_command(cloud: Cloud) -> str:
    """The ``acceleron`` command Acceleron's processes start with: the release's (`up
    --release`) or the checkout's."""
    if cloud.release:
        return str(VENVS / f"acceleron-{cloud.release}" / "bin" / "acceleron")
    return str(REPO / ".venv" / "bin" / "acceleron")


def manage(*argv: str) -> subprocess.CompletedProcess[str]:
    """The checkout's ``acceleron`` with the API replicas' configuration (``db upgrade
    --expand``, ``status upgrade check``, ...), run to its end; its exit status is the
    caller's to read."""
    config = str(RUN / "acceleron" / "acceleron.conf")
    command = [str(REPO / ".venv" / "bin" / "acceleron"), "--config-file", config, *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=WAIT, check=False)


def upgrade(cloud: Cloud, name: str) -> None:
    """Run Acceleron's process ``name`` (``acceleron-api-N``, ``agent-<host>``) on the
    checkout's release, as an operator's rolling upgrade does: a replica is drained at
    the balancer first (no new request; the balancer answers once none is left on it),
    stopped with SIGTERM, started again with the same arguments, waited for until it
    answers, and enabled again; an agent is stopped and started (it resumes its tasks)."""
    process = cloud.processes[name]
    process.argv[0] = str(REPO / ".venv" / "bin" / "acceleron")
    replica = name in cloud.ports
    if replica:
        balancer("drain", cloud, name)
    cloud.stop(name, wait=60)
    cloud.start(name)
    if replica:
        wait_for(name, answers(cloud.url(name)), cloud, [name])
        balancer("enable", cloud, name)
    log(f"{name}: upgraded")


def balancer(action: str, cloud: Cloud, name: str) -> None:
    """``drain`` (answered once no request is left on it) or ``enable`` the replica
    ``name`` at the balancer in front of the replicas."""
    url = f"{cloud.url(cloud.acceleron_port)}/-/{action}/{cloud.ports[name]}"
    request = urllib.request.Request(url, method="POST")
    with urllib.request.urlopen(request, timeout=WAIT * 2) as answer:
        if answer.status != 200:
            raise CloudError(f"the balancer could not {action} {name}: {answer.status}")
