"""Which options the ``acceleron`` command keeps for itself and which go to the command."""

from __future__ import annotations

from acceleron.cli.main import AcceleronApp


def parse(argv: list[str]) -> tuple[object, list[str]]:
    app = AcceleronApp()
    options, rest = app.parser.parse_known_args(argv)
    return options.timeout, rest


def test_a_timeout_after_the_command_is_the_commands() -> None:
    timeout, rest = parse(["--os-url", "http://a", "claim", "--profile", "p", "--timeout", "5"])
    assert rest == ["claim", "--profile", "p", "--timeout", "5"]
    assert timeout != 5
    timeout, rest = parse(["device", "drain", "x", "--timeout=7"])
    assert rest == ["device", "drain", "x", "--timeout=7"]


def test_a_timeout_before_the_command_is_the_http_timeout() -> None:
    timeout, rest = parse(["--timeout", "3", "--os-url", "http://a", "device", "list"])
    assert (timeout, rest) == (3.0, ["device", "list"])


def test_other_options_after_the_command_are_still_the_commands_or_global() -> None:
    app = AcceleronApp()
    options, rest = app.parser.parse_known_args(
        ["device", "list", "--os-url", "http://b", "-f", "json"]
    )
    assert options.os_url == "http://b" and rest == ["device", "list", "-f", "json"]
