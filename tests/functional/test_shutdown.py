"""Stopping ``acceleron api`` (SIGTERM, as systemd and a rolling upgrade stop it): the
requests still running finish, up to ``[api] shutdown_timeout``, instead of being cut."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fixtures.ports import free_port
from tests.fixtures.waiting import wait_for

V27 = {"OpenStack-API-Version": "accelerator 2.7"}
CHUNKS = 8  # half a second apart: the upload outlasts the stop by about 3 s


def _answers(url: str) -> bool:
    try:
        return requests.get(f"{url}/v2", timeout=10).status_code == 200
    except requests.ConnectionError:
        return False


@pytest.mark.slow
def test_a_request_running_when_the_api_is_stopped_finishes(tmp_path: Path) -> None:
    """A bitstream upload sent slowly, chunk by chunk, is under way when the API gets
    SIGTERM: the upload still ends 200 with every byte stored, and then the server exits.
    (Before ``shutdown_timeout`` the server gave open requests 2 s, and a rolling
    upgrade's stopped replica answered such a request 500.)"""
    config = tmp_path / "acceleron.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    command = [sys.executable, "-m", "acceleron.cli.main", "--config-file", str(config)]
    subprocess.run([*command, "db", "upgrade"], check=True, capture_output=True, timeout=120)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    server = subprocess.Popen(
        [*command, "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answers(url), seconds=120)
        created = requests.post(
            f"{url}/v2/bitstreams", json={"name": "slow.gbs"}, headers=V27, timeout=30
        )
        assert created.status_code == 201, created.text
        uuid = created.json()["uuid"]
        sent = threading.Event()

        def body() -> Iterator[bytes]:
            for n in range(CHUNKS):
                if n == 2:
                    sent.set()  # the upload is under way: stop the server now
                yield b"x" * 1024
                threading.Event().wait(0.5)

        upload: list[requests.Response] = []
        uploader = threading.Thread(
            target=lambda: upload.append(
                requests.put(
                    f"{url}/v2/bitstreams/{uuid}/data",
                    data=body(),
                    timeout=60,
                    headers={**V27, "Content-Type": "application/octet-stream"},
                )
            )
        )
        uploader.start()
        assert sent.wait(30)
        server.send_signal(signal.SIGTERM)
        uploader.join(60)
        # uvicorn ends by raising the signal it handled again: systemd counts that clean.
        assert server.wait(timeout=60) in (0, -signal.SIGTERM)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    (answer,) = upload
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["size"]) == ("active", CHUNKS * 1024)
