"""``acceleron api`` run as its systemd unit (etc/systemd/acceleron-api.service) runs it:
the file system read-only (ProtectSystem=strict) but for what the unit makes writable,
in a mount namespace of its own, with the default state_path placed under a root of the
test's. As shipped, a bitstream uploads; with the unit as it was once shipped (no
StateDirectory=), the upload is refused with a 503 naming the directory and the option,
which the CLI shows, instead of "An unexpected error occurred"."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath

import pytest
import requests

from acceleron import conf as confmod
from acceleron.cli.main import main
from acceleron.db import migrate
from acceleron.db.session import Database
from tests.fixtures import systemd
from tests.fixtures.answers import error
from tests.fixtures.ports import free_port
from tests.fixtures.waiting import wait_for

pytestmark = pytest.mark.slow
V2_7 = {"OpenStack-API-Version": "accelerator 2.7"}
OCTETS = {**V2_7, "Content-Type": "application/octet-stream"}


def answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/v2", timeout=2).status_code == 200
    except requests.ConnectionError:
        return False


@contextmanager
def api_under(unit: systemd.Unit, tmp_path: Path) -> Iterator[tuple[str, Path, Path]]:
    """The API as ``unit`` runs it, /var/lib/acceleron (the default state_path) placed
    under a root of this test's; its URL, its state_path and its log. Its database, a
    server's in a cloud, lies outside that root."""
    why = systemd.sandbox_unavailable(tmp_path / "probe")
    if why is not None:
        pytest.skip(f"cannot run the API read-only as its unit would: {why}")
    root = tmp_path / "root"
    state = root / PurePosixPath(confmod.load([], config_files=[]).state_path).relative_to("/")
    state.mkdir(parents=True)  # there, as /var/lib is, whether or not it may be written
    database = f"sqlite:///{tmp_path / 'acceleron.sqlite'}"
    migrate.upgrade(Database(database))
    port = free_port()
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {state}\n[database]\nconnection = {database}\n"
        f"[api]\nport = {port}\n"
    )
    acceleron = str(Path(sys.executable).parent / "acceleron")
    argv = [acceleron, "--config-file", str(config), "api"]
    log = tmp_path / "api.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            systemd.sandboxed(root, systemd.writable_paths(unit), argv),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: process.poll() is not None or answers(url))
        assert process.poll() is None, log.read_text()
        yield url, state, log
    finally:
        process.terminate()
        process.wait(timeout=30)


def put(url: str, data: bytes) -> requests.Response:
    created = requests.post(
        f"{url}/v2/bitstreams", json={"name": "nlb.gbs"}, headers=V2_7, timeout=30
    )
    assert created.status_code == 201, created.text
    path = f"{url}/v2/bitstreams/{created.json()['uuid']}/data"
    return requests.put(path, data=data, headers=OCTETS, timeout=30)


def test_an_upload_works_under_the_unit_as_shipped(tmp_path: Path) -> None:
    with api_under(systemd.load("acceleron-api.service"), tmp_path) as (url, state, log):
        response = put(url, b"bitstream bytes")
        assert response.status_code == 200, log.read_text()
        stored = state / "bitstreams" / response.json()["hash_value"]
        assert stored.read_bytes() == b"bitstream bytes"
        download = requests.get(f"{response.url}", headers=V2_7, timeout=30)
        assert download.content == b"bitstream bytes"
    assert "Traceback" not in log.read_text()


def test_without_a_state_directory_an_upload_is_a_503_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    unit = systemd.load("acceleron-api.service").without("StateDirectory")
    with api_under(unit, tmp_path) as (url, state, log):
        status, code, message = error(put(url, b"bitstream bytes"))
        spool = state / "upload-spool"
        assert (status, code) == (503, "acceleron.state_unwritable")
        assert message.startswith(f"This server cannot write to {spool} (Read-only file system)")
        assert "[DEFAULT] state_path" in message and "StateDirectory=" in message
        (tmp_path / "nlb.gbs").write_bytes(b"bitstream bytes")
        assert main(["--os-url", url, "bitstream", "upload", str(tmp_path / "nlb.gbs")]) == 1
        assert f"cannot write to {spool} (Read-only file system)" in capsys.readouterr().err
    assert "Traceback" not in log.read_text()
