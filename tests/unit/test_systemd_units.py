"""The systemd units of etc/systemd/ as shipped: ``systemd-analyze verify`` accepts them,
every file the service writes by default is writable under the unit's sandboxing, and
the agent's unit in docs/agent.md is the shipped one. (tests/functional/
test_sandboxed_api.py runs the API with the file system read-only as its unit makes it.)"""

from __future__ import annotations

import shutil
from pathlib import Path, PurePosixPath

import pytest

from acceleron import conf as confmod
from tests.fixtures import systemd

UNITS = ("acceleron-api.service", "acceleron-agent.service")
LOG_DIR = PurePosixPath("/var/log/acceleron")  # [DEFAULT] log_dir as docs/install.md sets it


def written_by_default() -> dict[str, PurePosixPath]:
    """Every path option whose default lies under [DEFAULT] state_path (the state
    directory itself, SQLite databases, stores, caches, journals), by its name."""
    conf = confmod.load([], config_files=[])
    paths = {"[DEFAULT] state_path": PurePosixPath(conf.state_path)}
    for group, opts in confmod.list_opts():
        for opt in opts:
            if isinstance(opt.default, str) and "$state_path" in opt.default:
                value = str(conf[group or "DEFAULT"][opt.dest] if group else conf[opt.dest])
                paths[f"[{group or 'DEFAULT'}] {opt.name}"] = PurePosixPath(
                    value.removeprefix("sqlite:///")
                )
    return paths


def test_some_options_default_under_the_state_path() -> None:
    found = written_by_default()
    for option in (
        "[database] connection",
        "[bitstreams] local_dir",
        "[bitstreams] cache_dir",
        "[agent] task_journal",
    ):
        assert found[option].is_relative_to("/var/lib/acceleron"), found


@pytest.mark.parametrize("name", UNITS)
def test_what_the_service_writes_by_default_is_writable_under_its_unit(name: str) -> None:
    """The API's unit once made the whole file system read-only (ProtectSystem=strict)
    without its state directory: every upload failed with 'Read-only file system'."""
    unit = systemd.load(name)
    refused = {o: str(p) for o, p in written_by_default().items() if not systemd.may_write(unit, p)}
    assert refused == {}, f"{name} does not let the service write these"
    assert systemd.may_write(unit, LOG_DIR)
    # The state directory systemd makes is the default state_path.
    assert unit.service("StateDirectory") == ["acceleron"]
    assert written_by_default()["[DEFAULT] state_path"] == PurePosixPath("/var/lib/acceleron")


def test_the_api_unit_makes_the_rest_read_only() -> None:
    unit = systemd.load("acceleron-api.service")
    assert unit.last("ProtectSystem") == "strict" and unit.last("User") == "acceleron"
    for path in ("/etc/acceleron/acceleron.conf", "/opt/acceleron/bin", "/var/lib/other"):
        assert not systemd.may_write(unit, PurePosixPath(path)), path
    assert systemd.may_write(unit, PurePosixPath("/tmp/acceleron-metrics-x"))  # its own /tmp
    # Without its StateDirectory= line, as it was shipped once: the state is read-only.
    assert not systemd.may_write(
        unit.without("StateDirectory"), PurePosixPath("/var/lib/acceleron")
    )


def need_systemd_analyze() -> None:
    if shutil.which("systemd-analyze") is None:
        pytest.skip(
            "systemd-analyze is not installed (Debian: apt-get install systemd; "
            ".ci/run installs it): the units are not verified here"
        )
    if not Path("/usr/lib/systemd/system/multi-user.target").exists():
        pytest.skip("this machine has no systemd units (multi-user.target) to verify against")


def test_systemd_analyze_verify_accepts_the_units_as_shipped(tmp_path: Path) -> None:
    need_systemd_analyze()
    done = systemd.verify([systemd.UNITS / name for name in UNITS], tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_systemd_analyze_verify_reports_a_mistake(tmp_path: Path) -> None:
    """What the test above asserts is empty is where systemd says what it ignores."""
    need_systemd_analyze()
    wrong = tmp_path / "acceleron-api.service"
    shipped = (systemd.UNITS / wrong.name).read_text()
    wrong.write_text(shipped.replace("ProtectSystem=strict", "ProtectSystem=strikt"))
    done = systemd.verify([wrong], tmp_path / "root")
    assert "ignoring: strikt" in done.stderr


def test_the_agent_unit_in_the_docs_is_the_shipped_one() -> None:
    text = (systemd.ROOT / "docs" / "agent.md").read_text()
    start = text.index("# /etc/systemd/system/acceleron-agent.service")
    documented = systemd.parse("docs", text[start : text.index("```", start)])
    assert documented.sections == systemd.load("acceleron-agent.service").sections


def test_the_api_units_user_is_made_by_the_shipped_sysusers_file() -> None:
    """The unit runs as ``acceleron``: docs/install.md and etc/sysusers.d/ say how that
    user is made (nothing did: the unit could not start)."""
    unit = systemd.load("acceleron-api.service")
    root = Path(__file__).resolve().parents[2]
    lines = (root / "etc/sysusers.d/acceleron.conf").read_text().splitlines()
    entries = [line.split() for line in lines if line.strip() and not line.startswith("#")]
    assert [(e[0], e[1]) for e in entries] == [("u", unit.last("User"))]
    assert unit.last("Group") == unit.last("User")  # sysusers' "u" makes the group too
    install = (root / "docs/install.md").read_text()
    assert "etc/sysusers.d/acceleron.conf" in install and "useradd --system" in install
