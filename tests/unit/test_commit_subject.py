"""The commit-msg hook (.ci/commit_subject.py): a subject of at most 72 characters, then
a blank line before the body."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.ci import ci_module

hook = ci_module("commit_subject")


def test_a_short_subject_and_a_body_after_a_blank_line_pass(tmp_path: Path) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("Pools: one reshape\n\nThe body, as long as it needs.\n# a comment\n")
    assert hook.main(["hook", str(message)]) == 0
    assert hook.problems("x" * 72) == []


def test_a_long_subject_or_a_body_on_the_next_line_is_refused(tmp_path: Path) -> None:
    assert hook.problems("x" * 73) == ["the subject has 73 characters, more than 72"]
    assert hook.problems("Subject\nbody at once") == [
        "the subject's next line is not blank: put the body after a blank line"
    ]
    assert hook.problems("# only a comment\n") == ["the message has no subject"]
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text("y" * 100 + "\n")
    assert hook.main(["hook", str(message)]) == 1
