"""The ``acceleron`` command: profile commands over REST, and the server-side commands."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import text

from acceleron import conf as confmod
from acceleron import report
from acceleron.cli.main import COMMANDS, LazyCommand, main
from acceleron.cli.server import banner
from acceleron.db import migrate
from acceleron.db.session import Database
from acceleron.drivers.fake import FakeDriver
from acceleron.service import device_profiles
from tests.fixtures.ports import free_port


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> Any:
    code, out, err = run(capsys, "--os-url", url, *argv, "-f", "json")
    assert code == 0, err
    return json.loads(out)


def test_profile_lifecycle(live_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    created = cli_json(
        capsys,
        live_api,
        "profile",
        "create",
        name,
        "--group",
        "resources:custom-accelerator-fpga=1,accel:function_name=gzip",
        "--group",
        "resources:CUSTOM_ACCELERATOR_GPU=2",
        "--description",
        "two groups",
    )
    assert created["groups"] == [
        {"resources:CUSTOM_ACCELERATOR_FPGA": "1", "accel:function_name": "gzip"},
        {"resources:CUSTOM_ACCELERATOR_GPU": "2"},
    ]
    assert created["enabled"] is True
    listed = cli_json(capsys, live_api, "profile", "list", "--name", name)
    assert [p["name"] for p in listed] == [name]
    assert cli_json(capsys, live_api, "profile", "disable", name)["enabled"] is False
    assert cli_json(capsys, live_api, "profile", "enable", created["uuid"])["enabled"] is True
    updated = cli_json(capsys, live_api, "profile", "update", name, "--description", "new")
    assert updated["description"] == "new"
    code, out, _ = run(capsys, "--os-url", live_api, "profile", "show", name)
    assert code == 0 and "[1] resources:CUSTOM_ACCELERATOR_GPU=2" in out  # readable table
    assert run(capsys, "--os-url", live_api, "profile", "delete", name)[0] == 0
    assert cli_json(capsys, live_api, "profile", "list", "--name", name) == []


def test_profile_create_from_json_like_the_openstack_cli(
    live_api: str, capsys: pytest.CaptureFixture[str]
) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    groups = [{"resources:FPGA": "1"}]
    created = cli_json(capsys, live_api, "profile", "create", name, json.dumps(groups))
    assert created["groups"] == groups


def test_errors_are_one_clear_line(live_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "--os-url", live_api, "profile", "show", "no-such-profile")
    assert code == 1
    assert err == "Device profile 'no-such-profile' not found.\n"  # the API's words, no status
    code, _, err = run(capsys, "--os-url", live_api, "profile", "create", "x", "--group", "oops")
    assert code == 1 and "expected key=value pairs" in err


@pytest.mark.parametrize(
    "argv",
    [("profile", "list"), ("deployable", "show", "x"), ("bitstream", "download", "x"),
     ("claim", "--profile", "p", "--consumer", str(uuid.uuid4())),
     ("release", "--consumer", str(uuid.uuid4()))],
)  # fmt: skip
def test_a_server_down_is_one_short_line_everywhere(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...]
) -> None:
    down = free_port()
    code, out, err = run(capsys, "--os-url", f"http://127.0.0.1:{down}/v2", *argv)
    assert (code, out) == (1, "")
    assert err == (
        f"Cannot reach Acceleron at http://127.0.0.1:{down} (connection refused). Is it "
        "running? `make run` starts one. That URL comes from --os-url.\n"
    )


def test_the_config_files_api_is_the_one_called(
    live_api: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``acceleron --config-file acceleron.conf device list`` calls the API the file
    describes (it went to the default URL and suggested `make run`)."""
    port = int(live_api.rsplit(":", 1)[1].split("/")[0])
    conf = tmp_path / "acceleron.conf"
    conf.write_text(f"[api]\nhost_ip = 0.0.0.0\nport = {port}\n")
    code, out, err = run(capsys, "--config-file", str(conf), "profile", "list", "-f", "json")
    assert (code, err) == (0, ""), err
    assert isinstance(json.loads(out), list)
    down = free_port()
    conf.write_text(f"[api]\npublic_endpoint = http://127.0.0.1:{down}\nport = {port}\n")
    code, out, err = run(capsys, "--config-file", str(conf), "profile", "list")
    assert (code, out) == (1, "")
    assert err == (
        f"Cannot reach Acceleron at http://127.0.0.1:{down} (connection refused): is the API "
        "that configuration describes running? That URL comes from --config-file ([api] "
        "public_endpoint, else host_ip and port): --os-url overrides it.\n"
    )


def test_keystone_down_is_named_keystone_not_acceleron(
    live_api: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    keystone = f"http://127.0.0.1:{free_port()}/v3"
    for name, value in (
        ("OS_AUTH_URL", keystone),
        ("OS_USERNAME", "u"),
        ("OS_PASSWORD", "p"),
        ("OS_PROJECT_NAME", "p"),
        ("OS_USER_DOMAIN_NAME", "Default"),
        ("OS_PROJECT_DOMAIN_NAME", "Default"),
    ):
        monkeypatch.setenv(name, value)
    code, out, err = run(capsys, "--os-url", live_api, "profile", "list")
    assert (code, out) == (1, "")
    assert err.endswith(
        f"Cannot reach Keystone at {keystone}/auth/tokens (connection refused). That URL comes "
        "from OS_AUTH_URL or --os-auth-url.\n"
    )


def test_debug_shows_the_whole_connection_error() -> None:
    down = f"http://127.0.0.1:{free_port()}"
    acceleron = str(Path(sys.executable).parent / "acceleron")
    done = subprocess.run(
        [acceleron, "--debug", "--os-url", down, "profile", "list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert f"Cannot reach Acceleron at {down} (connection refused)." in done.stderr
    assert "Traceback" in done.stderr and "ConnectionRefusedError" in done.stderr


def test_the_url_with_or_without_v2(
    live_api: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"cli-{uuid.uuid4().hex[:6]}"
    cli_json(capsys, f"{live_api}/v2", "profile", "create", name, "--group", "resources:FPGA=1")
    listed = cli_json(capsys, f"{live_api}/v2/", "profile", "list", "--name", name)
    assert [p["name"] for p in listed] == [name]
    monkeypatch.setenv("ACCELERON_URL", f"{live_api}/v2")
    code, out, err = run(capsys, "profile", "show", name, "-c", "name", "-f", "value")
    assert (code, out) == (0, f"{name}\n"), err


def test_a_url_that_is_not_the_apis_says_so(
    live_api: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS against the plain-HTTP API, or a path where the API is not: the URL tried,
    where it came from, and the fix; never a bare 404 or an SSL error code."""
    https = "https://" + live_api.removeprefix("http://")
    code, out, err = run(capsys, "--os-url", https, "profile", "list")
    assert (code, out) == (1, "")
    assert err.endswith(  # after the server's own complaint, in this process
        f"Cannot reach Acceleron at {https}: it does not answer TLS (an all-in-one serves plain "
        f"HTTP): try {live_api}. That URL comes from --os-url.\n"
    )
    monkeypatch.setenv("ACCELERON_URL", f"{live_api}/nowhere")
    code, out, err = run(capsys, "profile", "show", "x")
    assert (code, out) == (1, "")
    assert err == (
        f"{live_api}/nowhere does not answer as the root of Acceleron's API does (404 Not "
        "Found): give the API's root URL. That URL comes from ACCELERON_URL: change it, or "
        "give --os-url.\n"
    )


def test_bare_acceleron_prints_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    code: object
    try:
        code = main([])
    except SystemExit as exit:  # cliff's help exits
        code = exit.code or 0
    out = capsys.readouterr().out
    assert code == 0 and out.startswith("usage: ") and "\n  profile list  " in out


def test_a_group_help_lists_its_commands_and_what_they_do(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(capsys, "profile", "--help") == (
        0,
        (
            "The profile commands (each with --help for its options):\n"
            "  profile create   Create a device profile\n"
            "  profile delete   Delete device profiles (all or none: every one must exist and be "
            "unused)\n"
            "  profile disable  Stop new accelerator requests from using a device profile "
            "(existing ones stay)\n"
            "  profile enable   Allow new accelerator requests to use a device profile\n"
            "  profile list     List device profiles\n"
            "  profile show     Show a device profile by uuid or name\n"
            "  profile update   Change a device profile's description\n"
        ),
        "",
    )
    assert "--if-exists" in help_text(capsys, "release")  # a command's help, as before


def test_empty_lists_say_so(live_api: str, capsys: pytest.CaptureFixture[str]) -> None:
    base = ("--os-url", live_api)
    for argv, line in (
        (("arq", "list"), "No accelerator requests."),
        (("profile", "list", "--name", "nothing-here"), "No device profiles."),
        (("device", "list"), "No devices."),
        (("deployable", "list"), "No deployables."),
        (("deployable", "list", "--tree"), "No deployables."),
        (("bitstream", "list"), "No bitstreams."),
    ):
        assert run(capsys, *base, *argv) == (0, f"{line}\n", ""), argv
    assert run(capsys, *base, "arq", "list", "-f", "json") == (0, "[]\n", "")
    code, out, _ = run(capsys, *base, "arq", "list", "--print-empty", "-c", "uuid")
    assert code == 0 and out.splitlines()[1] == "| uuid |"


@pytest.mark.parametrize(
    ("typed", "meant"),
    [("profil list", "profile list"), ("profile lst", "profile list"),
     ("deploy list", "deployable list"), ("relase", "release")],
)  # fmt: skip
def test_a_near_miss_suggests_and_runs_nothing(
    capsys: pytest.CaptureFixture[str], typed: str, meant: str
) -> None:
    down = f"http://127.0.0.1:{free_port()}"  # a command that ran would say it cannot reach it
    code, out, err = run(capsys, "--os-url", down, *typed.split(), "--consumer", "x")
    assert (code, out) == (2, "")
    assert err == f"'{typed}' is not a command: see 'acceleron help'.\nDid you mean: {meant}?\n"


def test_a_group_name_alone_lists_its_commands(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "arq")
    assert (code, out) == (2, "")
    assert err.endswith("Did you mean: arq delete, arq list, arq program, arq show?\n")


def test_no_suggestion_for_what_resembles_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "xyzzy") == (2, "", "'xyzzy' is not a command: see 'acceleron help'.\n")


def help_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    try:
        assert main([*argv, "--help"]) == 0
    except SystemExit as exit:
        assert exit.code in (0, None)  # cliff: HelpExit() for the main --help
    return capsys.readouterr().out


def test_help_keeps_sentences_and_examples_whole(capsys: pytest.CaptureFixture[str]) -> None:
    listing = re.sub(r" {2,}", "  ", help_text(capsys).split("\nCommands:\n")[1])
    for name, target in COMMANDS.items():
        summary = inspect.getdoc(LazyCommand(name, target).load()) or ""
        first = summary.split("\n\n")[0]
        assert "\n" not in first and first.endswith("."), name  # one whole sentence
        assert f"  {name}  {first.rstrip('.')}\n" in listing, name
    assert (
        "\n    acceleron profile create fpga-gzip \\\n"
        "        --group resources:CUSTOM_ACCELERATOR_FPGA=1,accel:function_name=gzip\n"
    ) in help_text(capsys, "profile", "create")
    text = help_text(capsys, "release")
    assert "--if-exists" in text and "program" not in text and "--timeout" not in text


def test_a_client_command_imports_no_server_module(live_api: str) -> None:
    """The commands that only talk to the API start fast: they load neither the server's
    modules (FastAPI, SQLAlchemy) nor the other commands', nor Keystone's plugins when no
    Keystone is in play."""
    code = (
        "import sys; from acceleron.cli.main import main; "
        f"assert main(['--os-url', {live_api!r}, 'profile', 'list']) == 0; "
        "print(' '.join(sorted(sys.modules)))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env=env,
    )
    loaded = set(done.stdout.splitlines()[-1].split())
    assert "acceleron.cli.profiles" in loaded
    for heavy in (
        "fastapi",
        "sqlalchemy",
        "acceleron.db",
        "acceleron.cli.server",
        "acceleron.cli.bitstreams",
        "acceleron.cli.agent",
        "keystoneauth1.loading",
    ):
        assert heavy not in loaded, heavy


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n")
    return path


def test_db_upgrade_and_version(config_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = ["--config-file", str(config_file)]
    newest = ScriptDirectory.from_config(migrate.config()).get_revision("expand@head")
    assert newest is not None
    expand = newest.revision
    code, out, _ = run(capsys, *conf, "db", "version")
    assert code == 2 and f"expand:   none (newest: {expand};" in out
    code, out, _ = run(capsys, *conf, "db", "upgrade", "--revision", "0015")
    assert code == 0 and out == (
        "Database schema (expand): empty -> 0015\nDatabase schema (contract): empty -> 0015\n"
    )
    code, _, err = run(capsys, *conf, "db", "upgrade", "--contract")
    assert code == 1 and "run 'acceleron db upgrade --expand' first" in err
    code, out, _ = run(capsys, *conf, "db", "upgrade", "--expand")
    assert code == 0 and out.startswith(f"Database schema (expand): 0015 -> {expand}\n")
    code, out, _ = run(capsys, *conf, "db", "version")
    assert code == 2 and out == (
        f"expand:   {expand} (up to date)\ncontract: 0015 (newest: contract_0002; 2 pending)\n"
    )
    code, out, _ = run(capsys, *conf, "db", "upgrade")
    assert code == 0 and out.endswith("Database schema (contract): 0015 -> contract_0002\n")
    code, out, _ = run(capsys, *conf, "db", "version")
    assert code == 0 and "contract: contract_0002 (up to date)" in out


def test_db_upgrade_expand_on_a_fresh_database_says_the_expand_phase_alone(
    config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """It printed the contract phase too (``empty -> 0015``, a revision of the line before
    the split), as though contract had run."""
    newest = ScriptDirectory.from_config(migrate.config()).get_revision("expand@head")
    assert newest is not None
    code, out, _ = run(capsys, "--config-file", str(config_file), "db", "upgrade", "--expand")
    assert (code, out) == (0, f"Database schema (expand): empty -> {newest.revision}\n")
    contract = ScriptDirectory.from_config(migrate.config()).get_revision("contract@head")
    assert contract is not None
    code, out, _ = run(capsys, "--config-file", str(config_file), "db", "upgrade", "--contract")
    assert (code, out) == (0, f"Database schema (contract): 0015 -> {contract.revision}\n")


def test_db_upgrade_revision_keeps_the_phases_guards(
    tmp_path: Path, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--revision`` ran Alembic as asked: a contract revision before the expand phase was
    complete, and on a schema a newer release had changed."""
    conf = ["--config-file", str(config_file), "db", "upgrade"]
    assert run(capsys, *conf, "--revision", "0015")[0] == 0
    code, out, err = run(capsys, *conf, "--revision", "contract@head")
    assert (code, out) == (1, "")
    assert err.startswith("contract@head applies contract revision(s) (contract_0001")
    assert ") while the expand phase stays incomplete" in err
    assert "run 'acceleron db upgrade --expand' first" in err
    code, _, err = run(capsys, *conf, "--revision", "contract_0001")
    assert code == 1 and "stays incomplete" in err
    code, _, err = run(capsys, *conf, "--revision", "nonesuch")
    assert code == 1 and err.startswith("No revision 'nonesuch' to upgrade to:")
    assert run(capsys, *conf, "--revision", "heads")[0] == 0  # both phases: allowed
    db = Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")
    with db.engine.begin() as connection:  # a newer release's contract revision
        connection.execute(
            text(
                "UPDATE alembic_version SET version_num = 'contract_9999' "
                "WHERE version_num LIKE 'contract%'"
            )
        )
    db.dispose()
    code, _, err = run(capsys, *conf, "--revision", "expand@head")
    assert code == 1 and "contract_9999, which this Acceleron does not know" in err


def test_an_all_in_one_whose_upgrade_is_refused_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], keep_logging: None
) -> None:
    """Another upgrade holds the database: the all-in-one's own, at start, stops with the
    reason (it was a traceback)."""
    path = tmp_path / "acceleron.conf"
    path.write_text(f"[DEFAULT]\nstate_path = {tmp_path}\n[database]\nsqlite_busy_timeout = 0\n")
    holder = Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")
    try:
        with migrate.upgrade_lock(holder):
            code = main(["--config-file", str(path), "all-in-one", "--port", str(free_port())])
    finally:
        holder.dispose()
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("Another schema upgrade is running on this database"), err
    assert "Traceback" not in err


def test_db_rewrite_profiles(
    tmp_path: Path, config_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Database(f"sqlite:///{tmp_path / 'acceleron.sqlite'}")
    migrate.upgrade(db)
    device_profiles.create(
        db,
        name="old",
        groups=[
            {
                "resources:CUSTOM_ACCELERATOR_FPGA": "1",
                "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
            }
        ],
    )
    device_profiles.create(db, name="untouched", groups=[{"resources:PGPU": "1"}])
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(
        "resource_classes: {CUSTOM_ACCELERATOR_FPGA: FPGA}\n"
        "traits: {CUSTOM_FPGA_INTEL_ARRIA10: CUSTOM_FPGA_INTEL_PAC_ARRIA10, custom_gone: x}\n"
    )
    base = ("--config-file", str(config_file), "db", "rewrite-profiles", "--mapping", str(mapping))
    code, out, err = run(capsys, *base, "-f", "json")
    assert code == 0 and "would change (dry run: add --apply)" in err
    assert "Mapping entry matched no stored profile: traits: CUSTOM_GONE -> X\n" in err
    assert err.count("Mapping entry matched") == 1
    assert json.loads(out)[0]["profile"] == "old"
    assert device_profiles.get(db, "old").groups[0] == {
        "resources:CUSTOM_ACCELERATOR_FPGA": "1",
        "trait:CUSTOM_FPGA_INTEL_ARRIA10": "required",
    }
    code, _, err = run(capsys, *base, "--apply")
    assert code == 0 and "1 device profile(s) rewritten" in err
    assert device_profiles.get(db, "old").groups == [
        {"resources:FPGA": "1", "trait:CUSTOM_FPGA_INTEL_PAC_ARRIA10": "required"}
    ]
    mapping.write_text("traits: {CUSTOM_FPGA_INTEL_PAC_ARRIA10: 'not valid'}\n")
    code, _, err = run(capsys, *base, "--apply")
    assert code == 1 and "'old' would be invalid after the rewrite" in err
    db.dispose()


def test_config_sample_and_policy_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "config", "sample")
    assert code == 0
    for section in ("[DEFAULT]", "[api]", "[database]", "[device_profiles]"):
        assert section in out
    assert "#connection = sqlite:///$state_path/acceleron.sqlite" in out
    code, out, _ = run(capsys, "policy", "defaults")
    assert code == 0 and '"acceleron:device_profile:create": "rule:admin_api"' in out


def test_placement_sync_through_the_api(
    remote_live_api: str, placement: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    import requests

    from acceleron.placement.client import PlacementClient

    host = f"compute-{uuid.uuid4().hex[:6]}"
    PlacementClient(placement).create_provider(str(uuid.uuid4()), host)  # Nova's compute node
    conf = confmod.load([], config_files=[], overrides={"DEFAULT": {"host": host}})
    body = report.to_bytes(
        report.HostReport(host, "1", tuple(FakeDriver(conf, Path("/")).discover()))
    )
    answer = requests.put(
        f"{remote_live_api}/v2/hosts/{host}/report",
        data=body,
        timeout=30,
        headers={"OpenStack-API-Version": "accelerator 2.5", "Content-Type": "application/json"},
    )
    assert answer.status_code == 200, answer.text
    args = ("--os-url", remote_live_api, "placement", "sync", "--host", host, "-f", "json")
    code, out, err = run(capsys, *args)
    assert code == 0, err
    # The worker may have published the host already; either way the providers exist now.
    assert {row["op"] for row in json.loads(out)} <= {"create"}
    code, out, err = run(capsys, *args, "--dry-run")
    assert code == 0 and json.loads(out) == [] and "0 change(s) would be made" in err


@pytest.mark.parametrize("auth", ["noauth", "keystone"])
def test_the_banner_says_how_callers_are_authenticated(tmp_path: Path, auth: str) -> None:
    conf = confmod.load(
        [],
        config_files=[],
        overrides={
            "DEFAULT": {"state_path": str(tmp_path), "auth_strategy": auth, "host": "h"},
        },
    )
    text = banner(conf, "http://127.0.0.1:6666")  # the CLI's default: nothing to export
    assert "export" not in text
    assert (
        "  page       http://127.0.0.1:6666/ui\n  metrics    http://127.0.0.1:6666/metrics\n"
        in text
    )
    if auth == "keystone":
        assert text.startswith("Acceleron all-in-one (Keystone: callers need a token)\n")
        assert "X-Auth-Token" not in text and "with your OS_* credentials set" in text
    else:
        assert text.startswith("Acceleron all-in-one (no authentication: every caller is an ")
        assert "placement   (X-Auth-Token: admin)\n" in text
