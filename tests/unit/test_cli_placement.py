"""The line ``acceleron placement sync`` and ``migrate-to-nested`` write under their
table: an error row is no change."""

from __future__ import annotations

from acceleron.cli.placement import summary


def host(actions: int = 0, errors: int = 0) -> dict[str, object]:
    action = {"op": "create", "uuid": "u", "name": "n", "detail": ""}
    return {
        "hostname": "h",
        "skipped": False,
        "actions": [action] * actions,
        "errors": ["Placement refused it"] * errors,
    }


def test_an_error_alone_is_no_change() -> None:
    line = summary({"hosts": [host(errors=1)]}, dry_run=False)
    assert line == "0 change(s) made in Placement; 1 error(s), shown as rows.\n"


def test_changes_and_errors_are_counted_apart() -> None:
    body = {"hosts": [host(actions=2), host(actions=1, errors=2)]}
    assert summary(body, dry_run=True) == (
        "3 change(s) would be made (dry run) in Placement; 2 error(s), shown as rows.\n"
    )
    assert summary({"hosts": [host(actions=1)]}, dry_run=False) == (
        "1 change(s) made in Placement.\n"
    )
