"""``acceleron adopt cyborg`` as the operator runs it: the command line, its
configuration file, the real Placement served over HTTP, Cyborg's real schema.

The cloud is tests/fixtures/adoption.py's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from acceleron.cli.main import main
from tests.fixtures.adoption import Cloud, cloud, placement_url
from tests.fixtures.cyborg import cyborg, cyborg_url

__all__ = ["cloud", "cyborg", "cyborg_url", "placement_url"]

MAPPING = "traits:\n  CUSTOM_FAKE_DEVICE: CUSTOM_FPGA_INTEL\n"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _adopt(config: Path, *more: str) -> list[str]:
    mapping = config.parent / "mapping.yaml"
    mapping.write_text(MAPPING)
    return ["--config-file", str(config), "adopt", "cyborg", "--mapping", str(mapping), *more]


def test_cyborg_s_database_from_a_file_or_the_environment(
    cloud: Cloud,
    placement_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The URL, password and all, need not be on the command line (``ps``, the shell's
    history): a file's first line, or $ACCELERON_CYBORG_DATABASE."""
    config = cloud.config(tmp_path / "acceleron.conf", placement_url)
    secret = tmp_path / "cyborg-db.url"
    secret.write_text(f"{cloud.cyborg.url}\n")
    code, out, err = _run(capsys, *_adopt(config, "--database-file", str(secret), "--dry-run"))
    assert code == 0, err
    assert "create fpga-dp" in out
    monkeypatch.setenv("ACCELERON_CYBORG_DATABASE", cloud.cyborg.url)
    code, out, err = _run(capsys, *_adopt(config, "--dry-run"))
    assert code == 0 and "create fpga-dp" in out, err
    monkeypatch.delenv("ACCELERON_CYBORG_DATABASE")
    code, _, err = _run(capsys, *_adopt(config, "--dry-run"))
    assert code != 0 and "--database-file" in err and "ACCELERON_CYBORG_DATABASE" in err


def test_a_mistyped_sqlite_path_is_refused_and_not_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nconnection = sqlite:///{tmp_path}/a.db\n"
        "[placement]\nmode = remote\n"
    )
    typo = tmp_path / "cyborg.sqllite"
    code, _, err = _run(
        capsys, "--config-file", str(config), "adopt", "cyborg", "--database", f"sqlite:///{typo}"
    )
    assert code != 0 and f"{typo} does not exist" in err, err
    assert not typo.exists()


def test_a_log_it_cannot_write_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keep_logging: None
) -> None:
    config = tmp_path / "acceleron.conf"
    config.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\nlog_file = {tmp_path}/no/such/dir/a.log\n"
        "[placement]\nmode = remote\n"
    )
    code, _, err = _run(capsys, "--config-file", str(config), "adopt", "cyborg", "--dry-run")
    assert code != 0 and "Cannot log to" in err and "Nothing was changed" in err, err
    assert "Traceback" not in err


def test_embedded_placement_is_refused_and_nothing_is_written(cloud: Cloud, tmp_path: Path) -> None:
    """Cyborg's providers are in the cloud's Placement: an embedded one is refused
    before it is built (building it migrates its database), even for a dry run."""
    embedded = tmp_path / "placement.sqlite"
    config = cloud.config(
        tmp_path / "acceleron.conf",
        "http://unused",
        placement={"mode": "embedded", "embedded_connection": f"sqlite:///{embedded}"},
    )
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "acceleron"),
            *_adopt(config, "--dry-run"),
            "--database",
            cloud.cyborg.url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "mode = remote (it is embedded)" in done.stderr, done.stderr
    assert not embedded.exists()


def test_a_placement_without_cyborg_s_providers_exits_non_zero(
    cloud: Cloud, placement_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    client = cloud.client()
    for server in cloud.servers:
        client.delete_allocations(server)
    client.delete_provider(cloud.old_provider)
    before = cloud.state()
    config = cloud.config(tmp_path / "acceleron.conf", placement_url)
    code, _, err = _run(capsys, *_adopt(config, "--database", cloud.cyborg.url))
    assert code == 1, err
    assert f"({cloud.old_provider}) is not in Placement" in err, err
    assert "Adopted" not in err
    assert cloud.state() == before


def test_every_change_goes_to_the_log_and_the_plan_to_a_file(
    cloud: Cloud,
    placement_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    keep_logging: None,
) -> None:
    """With [DEFAULT] log_file set, each change the adoption prints is in the log as
    well; a run that changes something writes its plan file even without --plan-file."""
    log = tmp_path / "acceleron.log"
    config = cloud.config(
        tmp_path / "acceleron.conf", placement_url, DEFAULT={"log_file": str(log)}
    )
    code, out, err = _run(capsys, *_adopt(config, "--database", cloud.cyborg.url))
    assert code == 0, err
    done = [line.removeprefix("done: ") for line in out.splitlines() if line.startswith("done: ")]
    assert len(done) >= 7
    logged = log.read_text()
    for line in done:
        assert f"Adopting Cyborg: {line}" in logged
    (written,) = tmp_path.glob("cyborg-adoption-*.json")
    assert str(written) in err
    document = json.loads(written.read_text())
    (provider,) = document["cyborg_providers"]
    assert provider["uuid"] == cloud.old_provider and provider["parent_uuid"] == cloud.compute
    assert provider["traits"] == ["CUSTOM_FAKE_DEVICE", "OWNER_CYBORG"]
    assert {s["consumer"] for s in document["servers"]} == set(cloud.servers)
    assert {(s["project_id"], s["user_id"]) for s in document["servers"]} == {("p1", "u1")}
    assert "1 device profile(s) created, 2 accelerator request(s) adopted" in err
    code, _, err = _run(capsys, *_adopt(config, "--database", cloud.cyborg.url))
    assert code == 0 and "Nothing to do" in err
    assert len(list(tmp_path.glob("cyborg-adoption-*.json"))) == 1  # nothing to do: no file
