"""Refuse a commit message whose subject (its first line) is longer than 72 characters
or is followed by a line that is not blank: a subject of at most 72 characters, then a
blank line and a body for the rest (CONTRIBUTING.md, "Commits"). pre-commit runs it as
the commit-msg hook (`make hooks`) with the message's file."""

from __future__ import annotations

import sys
from pathlib import Path

LIMIT = 72


def problems(message: str) -> list[str]:
    lines = [line for line in message.splitlines() if not line.startswith("#")]
    if not lines or not lines[0].strip():
        return ["the message has no subject"]
    found = []
    if len(lines[0]) > LIMIT:
        found.append(f"the subject has {len(lines[0])} characters, more than {LIMIT}")
    if len(lines) > 1 and lines[1].strip():
        found.append("the subject's next line is not blank: put the body after a blank line")
    return found


def main(argv: list[str]) -> int:
    found = problems(Path(argv[1]).read_text())
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
