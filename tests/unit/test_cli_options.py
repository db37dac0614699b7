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


def test_keystone_and_repeated_options_before_the_command_take_their_values() -> None:
    # keystoneauth's options (loaded when an --os- option asks for Keystone), a repeated
    # --config-file and --log-file each take the next word: the command starts after them.
    argv = ["--os-auth-type", "password", "--os-auth-url", "http://k", "--config-file", "a"]
    argv += ["--config-file", "b", "--log-file", "l", "--debug", "claim", "--timeout", "5"]
    app = AcceleronApp(argv)
    options, rest = app.parser.parse_known_args(argv)
    assert rest == ["claim", "--timeout", "5"]
    assert options.timeout != 5 and options.config_file == ["a", "b"]
    assert (options.os_auth_url, options.log_file, options.debug) == ("http://k", "l", True)
