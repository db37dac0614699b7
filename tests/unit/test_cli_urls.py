"""Where the CLI's API URL comes from, what it says when the URL cannot be the API's,
and when it loads Keystone's options at all."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from acceleron.cli.client import DEFAULT_URL, CommandError, Endpoint, check_url, wants_keystone


def endpoint(monkeypatch: pytest.MonkeyPatch, env: str | None, flag: str | None) -> Endpoint:
    if env is None:
        monkeypatch.delenv("ACCELERON_URL", raising=False)
    else:
        monkeypatch.setenv("ACCELERON_URL", env)
    return Endpoint.of(argparse.Namespace(os_url=flag, os_endpoint=None), keystone=False)


def test_the_url_and_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    found = endpoint(monkeypatch, None, None)
    assert found == Endpoint(DEFAULT_URL, "the default")
    assert found.origin() == (
        "That URL is the default: set ACCELERON_URL or give --os-url for another."
    )
    found = endpoint(monkeypatch, "http://a:1", None)
    assert found == Endpoint("http://a:1", "ACCELERON_URL")
    assert found.origin() == "That URL comes from ACCELERON_URL: change it, or give --os-url."
    assert endpoint(monkeypatch, "http://a:1", "http://b:2") == Endpoint("http://b:2", "--os-url")
    monkeypatch.delenv("ACCELERON_URL")
    keystone = Endpoint.of(argparse.Namespace(os_url=None, os_endpoint="http://k"), keystone=True)
    assert keystone.url is None and "--os-url overrides it" in keystone.origin()


@pytest.mark.parametrize(
    ("section", "url"),
    [
        ("[api]\nhost_ip = 10.0.0.5\nport = 7000\n", "http://10.0.0.5:7000"),
        ("[api]\nhost_ip = 0.0.0.0\n", "http://127.0.0.1:6666"),
        ("[api]\nhost_ip = ::\nport = 7000\n", "http://[::1]:7000"),
        ("[api]\nport = 7000\npublic_endpoint = https://cloud/accelerator\n",
         "https://cloud/accelerator"),
    ],
)  # fmt: skip
def test_a_config_file_gives_its_apis_url(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, section: str, url: str
) -> None:
    monkeypatch.setenv("ACCELERON_URL", "http://from-the-environment:1")
    path = tmp_path / "acceleron.conf"
    path.write_text(section)
    options = argparse.Namespace(os_url=None, os_endpoint=None, config_file=[str(path)])
    for keystone in (False, True):  # the catalog may still name Cyborg (an adoption)
        assert Endpoint.of(options, keystone) == Endpoint(url, "--config-file")
    options.os_url = "http://given:2"
    assert Endpoint.of(options, False) == Endpoint("http://given:2", "--os-url")


def test_a_config_file_that_does_not_load_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "acceleron.conf"
    path.write_text("[api]\nport = many\n")
    options = argparse.Namespace(os_url=None, os_endpoint=None, config_file=[str(path)])
    with pytest.raises(CommandError, match=r"Configuration error: .*port"):
        Endpoint.of(options, False)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("127.0.0.1:7400", "'127.0.0.1:7400' is not a URL: give it with its scheme, e.g. "
                           "http://127.0.0.1:7400. That URL comes from ACCELERON_URL"),
        ("localhost:7400/v2", "e.g. http://localhost:7400/v2."),
        ("", "'' is not a URL: give it with its scheme, e.g. http://127.0.0.1:6666."),
        ("http://h:7400/placement", "http://h:7400/placement is Placement's URL, not "
                                    "Acceleron's: give the API's root, http://h:7400. That URL"),
        ("http://h:7400/placement/v2/", "give the API's root, http://h:7400."),
        ("http://h:7400/v1", "http://h:7400/v1 is a version 1 API, which Acceleron does not "
                             "serve: give the API's root, http://h:7400."),
    ],
)  # fmt: skip
def test_a_url_that_cannot_be_the_apis_names_the_fix(url: str, message: str) -> None:
    with pytest.raises(CommandError) as raised:
        check_url(Endpoint(url, "ACCELERON_URL"))
    assert message in str(raised.value)


@pytest.mark.parametrize("url", ["http://h:7400", "https://h/accelerator/v2", "http://h/v2/"])
def test_an_api_url_passes(url: str) -> None:
    assert check_url(Endpoint(url, "--os-url")) == url


@pytest.mark.parametrize(
    ("argv", "environ", "keystone"),
    [
        (["profile", "list"], {}, False),
        (["--os-url", "http://a", "--insecure", "profile", "list"], {}, False),
        (["profile", "list", "--help"], {}, False),  # the command's help has no Keystone
        (["profile", "list"], {"OS_AUTH_TYPE": "none"}, False),
        (["profile", "list"], {"OS_AUTH_URL": "http://keystone/v3"}, True),
        (["profile", "list"], {"OS_AUTH_TYPE": "v3token"}, True),
        (["--os-auth-url", "http://k", "profile", "list"], {}, True),
        (["--os-password=x", "profile", "list"], {}, True),
        (["--help"], {}, True),  # the global help lists Keystone's options
        (["help"], {}, True),
        ([], {}, True),
        (["--version"], {}, False),
        (["help", "profile", "list"], {}, False),
    ],
)  # fmt: skip
def test_keystone_is_loaded_only_when_in_play(
    argv: list[str], environ: dict[str, str], keystone: bool
) -> None:
    assert wants_keystone(argv, environ) is keystone
