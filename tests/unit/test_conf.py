"""Configuration: the file, and environment overrides of it (``OS_<GROUP>__<OPTION>``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from acceleron import conf as confmod


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "acceleron.conf"
    path.write_text(
        "[DEFAULT]\ndebug = false\n"
        "[database]\nconnection = sqlite:///from-file.sqlite\n"
        "[device_profiles]\nmax_groups = 7\nmax_accelerators = 9\n"
    )
    return path


def test_the_file_is_read(config_file: Path) -> None:
    conf = confmod.load([], config_files=[str(config_file)])
    assert conf.database.connection == "sqlite:///from-file.sqlite"
    assert conf.device_profiles.max_groups == 7


def test_the_environment_overrides_the_file(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OS_DATABASE__CONNECTION", "postgresql+psycopg://acceleron@db/acceleron")
    monkeypatch.setenv("OS_DEFAULT__DEBUG", "true")
    monkeypatch.setenv("OS_DEVICE_PROFILES__MAX_GROUPS", "5")
    conf = confmod.load([], config_files=[str(config_file)])
    assert conf.database.connection == "postgresql+psycopg://acceleron@db/acceleron"
    assert conf.debug is True
    assert conf.device_profiles.max_groups == 5
    assert conf.device_profiles.max_accelerators == 9  # not overridden: from the file


def test_the_environment_overrides_defaults_without_a_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OS_API__PORT", "7777")
    conf = confmod.load([], config_files=[])
    assert conf.api.port == 7777
    assert conf.api.host_ip == "127.0.0.1"
