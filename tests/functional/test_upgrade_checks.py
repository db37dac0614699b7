"""``acceleron status upgrade check``: each check's Success, Warning and Failure, and the
command's exit status (oslo.upgradecheck's: the worst result, 255 when a check fails to run)."""

from __future__ import annotations

from pathlib import Path

import pytest
from oslo_upgradecheck.upgradecheck import Code
from sqlalchemy import insert, text
from starlette.testclient import TestClient

import acceleron
from acceleron.cli.main import main
from acceleron.db import migrate
from acceleron.db.models import Host, table
from acceleron.db.session import Database
from acceleron.service import device_profiles
from acceleron.service.upgrade_checks import Checks, parse_version


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Database:
    return Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")


def test_schema_check(sqlite_db: Database) -> None:
    result = Checks(sqlite_db)._schema()
    assert result.code == Code.FAILURE and "run 'acceleron db upgrade'" in str(result.details)
    migrate.upgrade(sqlite_db, "0015")  # the previous release's schema
    result = Checks(sqlite_db)._schema()
    assert result.code == Code.WARNING
    assert "run 'acceleron db upgrade --expand' next" in str(result.details)
    assert "run 'acceleron db upgrade --contract' once every API" in str(result.details)
    migrate.expand(sqlite_db)
    result = Checks(sqlite_db)._schema()
    assert result.code == Code.WARNING and "--expand" not in str(result.details)
    migrate.contract(sqlite_db)
    result = Checks(sqlite_db)._schema()
    assert (result.code, result.details) == (Code.SUCCESS, None)
    with sqlite_db.engine.begin() as conn:  # a newer release's expand: this one runs on it
        conn.execute(
            text(
                "UPDATE alembic_version SET version_num = 'expand_9999' "
                "WHERE version_num LIKE 'expand%'"
            )
        )
    result = Checks(sqlite_db)._schema()
    assert result.code == Code.SUCCESS and "newer release (expand_9999)" in str(result.details)
    with sqlite_db.engine.begin() as conn:  # a newer release's contract: it cannot
        conn.execute(
            text(
                "UPDATE alembic_version SET version_num = 'contract_9999' "
                "WHERE version_num LIKE 'contract%'"
            )
        )
    result = Checks(sqlite_db)._schema()
    assert result.code == Code.FAILURE and "contract_9999" in str(result.details)
    sqlite_db.dispose()


def _hosts(db: Database, versions: dict[str, str | None]) -> None:
    with db.writer() as conn:
        for hostname, version in versions.items():
            conn.execute(insert(table(Host)).values(hostname=hostname, agent_version=version))


def test_agent_check(db: Database) -> None:
    result = Checks(db, version="0.3.0")._agents()
    assert (result.code, result.details) == (Code.SUCCESS, "No agent has reported yet.")
    _hosts(db, {"same": "0.3.0", "same-series": "0.3.0.dev4"})
    assert Checks(db, version="0.3.0")._agents().code == Code.SUCCESS
    _hosts(db, {"older": "0.2.1", "newer": "0.4.0", "silent": None})
    result = Checks(db, version="0.3.0")._agents()
    assert result.code == Code.WARNING
    assert result.details == (
        "Agents that reported no version: silent (no version). "
        "Agents of an older release than 0.3.0: older (0.2.1). "
        "Upgrade them once the APIs run this release, before 'acceleron db upgrade --contract'. "
        "Agents newer than this API (0.3.0): newer (0.4.0). Upgrade the APIs before the agents."
    )
    _hosts(db, {"ancient": "0.0.9"})
    result = Checks(db, version="0.3.0")._agents()
    assert result.code == Code.FAILURE
    assert str(result.details).startswith(
        "Agents older than 0.1, the oldest release this one runs beside: ancient (0.0.9). "
        "This release's API still takes their reports while they are in a report format it "
        "reads (it refuses only another format, 409 acceleron.unsupported_format)"
    )


def test_an_agent_too_old_for_the_check_still_reports_as_the_check_says(
    api: TestClient, db: Database
) -> None:
    """The check said such an agent's reports were refused; the API took one (200). The
    API checks the report's format, not the agent's release (a rolling upgrade keeps the
    previous release's agents reporting): the check now says so, and this holds it."""
    body: dict[str, object] = {"hostname": "ancient", "agent_version": "0.0.9", "devices": []}
    headers = {"OpenStack-API-Version": "accelerator 2.5"}
    assert api.put("/v2/hosts/ancient/report", json=body, headers=headers).status_code == 200
    result = Checks(db, version="0.3.0")._agents()
    assert result.code == Code.FAILURE
    assert "ancient (0.0.9)" in str(result.details)
    assert "still takes their reports" in str(result.details)
    body = {**body, "report_version": 2}  # a format it does not read: refused, as said
    answer = api.put("/v2/hosts/ancient/report", json=body, headers=headers)
    assert answer.status_code == 409
    assert answer.json()["errors"][0]["code"] == "acceleron.unsupported_format"


def test_versions_are_read_as_numbers() -> None:
    assert parse_version("0.10.0") > parse_version("0.9.3")  # type: ignore[operator]
    assert parse_version("1.2") == (1, 2, 0)
    assert parse_version("2.0.0rc1") == (2, 0, 0)
    assert parse_version(None) is None and parse_version("dev") is None


def test_profile_check_is_rewrite_profiles_dry_run(db: Database) -> None:
    device_profiles.create(
        db, name="old", groups=[{"resources:CUSTOM_ACCELERATOR_FPGA": "1", "resources:FPGA": "1"}]
    )
    device_profiles.create(db, name="untouched", groups=[{"resources:PGPU": "1"}])
    assert Checks(db)._profiles().code == Code.SUCCESS  # this release renamed nothing
    renames = device_profiles.NameMapping.from_dict({"traits": {"CUSTOM_GONE": "CUSTOM_NEW"}})
    assert Checks(db, renames=renames)._profiles().code == Code.SUCCESS
    device_profiles.create(
        db, name="renamed", groups=[{"trait:CUSTOM_GONE": "required", "resources:PGPU": "1"}]
    )
    result = Checks(db, renames=renames)._profiles()
    assert result.code == Code.WARNING
    assert "this release renamed: renamed. Run 'acceleron db rewrite-profiles'" in str(
        result.details
    )
    merging = device_profiles.NameMapping.from_dict(
        {"resource_classes": {"CUSTOM_ACCELERATOR_FPGA": "FPGA"}}
    )
    result = Checks(db, renames=merging)._profiles()
    assert result.code == Code.FAILURE
    assert "'old' would be invalid after the rewrite" in str(result.details)
    assert device_profiles.get(db, "renamed").groups[0] == {
        "trait:CUSTOM_GONE": "required",
        "resources:PGPU": "1",
    }


def test_an_unreachable_database_is_a_failed_check_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``Checks()`` read the schema in its constructor: the command printed a traceback
    (exit 255). Now nothing is read until a check runs, and each check that cannot read
    the database fails, saying why."""
    url = "postgresql+psycopg://acceleron:SECRET@127.0.0.1:1/acceleron"  # nothing listens
    checks = Checks(Database(url))  # reads nothing
    assert checks.check() == Code.FAILURE
    assert "Connection refused" in capsys.readouterr().out
    config = tmp_path / "acceleron.conf"
    config.write_text(f"[database]\nconnection = {url}\n")
    assert main(["--config-file", str(config), "status", "upgrade", "check"]) == 2
    out = " ".join(capsys.readouterr().out.replace("|", " ").split())
    assert "Traceback" not in out and "SECRET" not in out
    assert out.count("Result: Failure") == 3
    assert (
        "The database (postgresql+psycopg://acceleron:***@127.0.0.1:1/acceleron) cannot be" in out
    )
    assert "Check [database] connection and that the database answers" in out


def test_the_check_names_the_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "acceleron.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    main(["--config-file", str(config), "status", "upgrade", "check"])
    assert f"Acceleron {acceleron.__version__} upgrade check" in capsys.readouterr().out


def test_the_command_exits_with_the_worst_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "acceleron.conf"
    config.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    command = ["--config-file", str(config), "status", "upgrade", "check"]
    assert main(command) == 2  # no schema
    out = capsys.readouterr().out
    assert "Check: Database schema" in out and "Result: Failure" in out
    db = Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")
    migrate.upgrade(db, "0015")
    assert main(command) == 1
    assert "Result: Warning" in capsys.readouterr().out
    migrate.all_phases(db)
    assert main(command) == 0
    out = capsys.readouterr().out
    assert out.count("Result: Success") == 3, out
    with db.engine.begin() as conn:
        conn.execute(text("DROP TABLE hosts"))  # a check that cannot run
    assert main(command) == 255
    assert "Error:\nTraceback" in capsys.readouterr().out
    db.dispose()
