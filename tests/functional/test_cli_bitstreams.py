"""``acceleron bitstream ...`` against a live API (SQLite, local store): upload with a
progress bar and GBS auto-fill, list, show, verified download, delete."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from oslo_config import cfg

from acceleron.api.app import create_app
from acceleron.cli.main import main
from acceleron.db.session import Database
from acceleron.drivers import gbs
from tests.fixtures.server import serve

INTERFACE = "ce48969398f05f33946d560708be108a"
AFU = "d8424dc4a4a3c413f89e433683f9040b"
AFU2 = "5d2e2f3c8b9a4c1d9e0f1a2b3c4d5e6f"


def dashed(value: str) -> str:
    return str(uuid.UUID(value))


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    code = main(["--os-url", url, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def as_json(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> Any:
    code, out, err = run(capsys, url, *argv, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def gbs_file(tmp_path: Path, name: str, *afus: str, size: int = 300_000) -> Path:
    path = tmp_path / name
    path.write_bytes(gbs.build(INTERFACE, afus, b"\x5a" * size))
    return path


def test_upload_fills_the_gbs_metadata_and_shows_progress(
    live_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = gbs_file(tmp_path, "nlb0.gbs", AFU, size=3_000_000)
    name = f"nlb0-{uuid.uuid4().hex[:6]}"
    code, out, err = run(
        capsys,
        live_api,
        "bitstream",
        "upload",
        str(path),
        "--name",
        name,
        "--function-name",
        "nlb0",
        "--vendor",
        "8086",
        "-f",
        "json",
    )
    assert code == 0, err
    made = json.loads(out)
    assert (made["name"], made["status"], made["size"]) == (name, "active", path.stat().st_size)
    assert made["hash_value"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (made["function_uuid"], made["region_type_uuid"]) == (dashed(AFU), dashed(INTERFACE))
    assert made["function_name"] == "nlb0" and made["vendor"] == "8086"
    assert f"Region type {INTERFACE} taken from the GBS header." in err
    assert f"Function {AFU} taken from the GBS header." in err
    # Not a terminal: the bar is drawn every tenth, and ends its line at 100 %.
    bars = err.split("\r")[1:]
    assert bars[0] == f"nlb0.gbs [{' ' * 30}]   0%  0.0/2.9 MiB"
    assert bars[5] == f"nlb0.gbs [{'#' * 15}{' ' * 15}]  50%  1.4/2.9 MiB"
    assert bars[-1] == f"nlb0.gbs [{'#' * 30}] 100%  2.9/2.9 MiB\n"
    assert len(bars) == 11


def test_given_flags_win_over_the_header(
    live_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = gbs_file(tmp_path, "two.gbs", AFU, AFU2)
    code, out, err = run(
        capsys, live_api, "bitstream", "upload", str(path), "--region-type", AFU2, "-f", "json"
    )
    assert code == 0, err
    made = json.loads(out)
    assert (made["name"], made["region_type_uuid"], made["function_uuid"]) == (
        "two.gbs",
        dashed(AFU2),
        None,
    )
    assert "Region type" not in err
    assert f"The GBS header names 2 functions ({AFU}, {AFU2}): give one with" in err
    plain = tmp_path / "plain.bin"
    plain.write_bytes(b"not a gbs")
    code, out, err = run(
        capsys,
        live_api,
        "bitstream",
        "upload",
        str(plain),
        "--function-uuid",
        AFU,
        "--property",
        "accel:shell=d5005",
        "-f",
        "json",
    )
    assert code == 0 and "GBS" not in err
    made = json.loads(out)
    assert (made["function_uuid"], made["region_type_uuid"]) == (dashed(AFU), None)
    assert made["properties"] == {"accel:shell": "d5005"}
    code, out, err = run(capsys, live_api, "bitstream", "download", made["uuid"], "-o", "-")
    assert (code, out) == (0, "not a gbs"), err


def test_list_show_download_delete(
    live_api: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    function = str(uuid.uuid4())
    path = gbs_file(tmp_path, "dl.gbs", AFU)
    made = as_json(capsys, live_api, "bitstream", "upload", str(path), "--function-uuid", function)
    listed = as_json(capsys, live_api, "bitstream", "list", "--function-uuid", function)
    assert listed == [made]
    code, out, _ = run(
        capsys,
        live_api,
        "bitstream",
        "list",
        "--function-uuid",
        function,
        "--region-type",
        INTERFACE,
        "-f",
        "value",
        "-c",
        "uuid",
    )
    assert (code, out) == (0, f"{made['uuid']}\n")
    code, out, _ = run(capsys, live_api, "bitstream", "list", "--function-uuid", function)
    assert code == 0 and "| region_type_uuid" in out and "hash_value" not in out
    code, out, _ = run(capsys, live_api, "bitstream", "show", made["uuid"])
    assert code == 0 and made["hash_value"] in out
    dest = tmp_path / "out" / "copy.gbs"
    code, _, err = run(capsys, live_api, "bitstream", "download", made["uuid"], "-o", str(dest))
    assert code == 0, err
    assert dest.read_bytes() == path.read_bytes()
    assert f"{made['size']} bytes, sha256 verified" in err
    monkeypatch.chdir(tmp_path / "out")
    assert run(capsys, live_api, "bitstream", "download", made["uuid"])[0] == 0
    assert (tmp_path / "out" / "dl.gbs").read_bytes() == path.read_bytes()
    assert run(capsys, live_api, "bitstream", "delete", made["uuid"])[0] == 0
    assert as_json(capsys, live_api, "bitstream", "list", "--function-uuid", function) == []
    code, _, err = run(capsys, live_api, "bitstream", "show", made["uuid"])
    assert (code, err.strip()) == (1, f"Bitstream '{made['uuid']}' not found.")


def test_a_bitstream_by_name(
    live_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    name = f"twice-{uuid.uuid4().hex[:6]}"
    path = gbs_file(tmp_path, "twice.gbs", AFU)
    first, second = (
        as_json(capsys, live_api, "bitstream", "upload", str(path), "--name", name)
        for _ in range(2)
    )
    assert run(capsys, live_api, "bitstream", "show", name) == (
        1,
        "",
        (f"Bitstream named {name!r}: 2 match ({first['uuid']}, {second['uuid']}). Give a uuid.\n"),
    )
    assert run(capsys, live_api, "bitstream", "delete", first["uuid"])[0] == 0
    assert as_json(capsys, live_api, "bitstream", "show", name)["uuid"] == second["uuid"]
    code, _, err = run(capsys, live_api, "bitstream", "download", name, "-o", str(tmp_path / "x"))
    assert code == 0, err
    assert run(capsys, live_api, "bitstream", "delete", name)[0] == 0
    assert run(capsys, live_api, "bitstream", "show", name) == (
        1,
        "",
        f"No bitstream named {name!r}.\n",
    )


def test_errors_are_one_clear_line(
    live_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, live_api, "bitstream", "upload", str(tmp_path / "none.gbs"))
    assert (code, err.strip()) == (1, f"{tmp_path / 'none.gbs'}: no such file.")
    path = gbs_file(tmp_path, "x.gbs", AFU)
    code, _, err = run(capsys, live_api, "bitstream", "upload", str(path), "--property", "oops")
    assert (code, err.strip().splitlines()[-1]) == (1, "--property 'oops': expected KEY=VALUE.")
    code, _, err = run(capsys, live_api, "bitstream", "upload", str(path), "--function-uuid", "x")
    assert code == 1 and "function_uuid: 'x' is not a UUID" in err
    code, _, err = run(capsys, live_api, "bitstream", "list", "--region-type", "nope")
    assert code == 1 and "is not a UUID" in err


# --- an API of its own: a small size limit, and a store the test can damage ------------


@pytest.fixture
def small_api(conf: cfg.ConfigOpts, sqlite_db: Database) -> Iterator[str]:
    conf.set_override("max_size_mb", 1, group="bitstreams")
    with serve(create_app(conf, sqlite_db)) as url:
        yield url


def test_a_refused_upload_leaves_nothing(
    small_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * (3 << 20))
    code, _, err = run(capsys, small_api, "bitstream", "upload", str(path))
    assert code == 1
    assert err.strip().endswith(
        "The bitstream is larger than the 1 MiB this API takes ([bitstreams] max_size_mb)."
    )
    assert as_json(capsys, small_api, "bitstream", "list") == []


def test_download_refuses_damaged_bytes(
    small_api: str, conf: cfg.ConfigOpts, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = gbs_file(tmp_path, "d.gbs", AFU, size=900_000)
    made = as_json(capsys, small_api, "bitstream", "upload", str(path))
    stored = Path(conf.bitstreams.local_dir) / made["hash_value"]
    damaged = stored.read_bytes()[::-1]  # same size, other bytes
    stored.write_bytes(damaged)
    dest = tmp_path / "out" / "d.gbs"
    code, _, err = run(capsys, small_api, "bitstream", "download", made["uuid"], "-o", str(dest))
    assert code == 1 and "is corrupt: recorded sha256 " + made["hash_value"] in err, err
    assert hashlib.sha256(damaged).hexdigest() in err
    assert not dest.parent.exists()  # refused before anything was written
