"""How long a CLI command takes from the shell's point of view: a new ``acceleron``
process, its imports, its request to the all-in-one, its answer, its exit.

Starts Acceleron the way ``make run`` does, then times ``--runs`` runs of each
command (wall time, start to exit). ``--busy N`` keeps N busy loops running meanwhile,
as other work does on a shared machine.

    .venv/bin/python bench/cli.py [--runs 20] [--busy 1]

Python writes no bytecode cache when PYTHONDONTWRITEBYTECODE is set: every run then
compiles every module it imports, which costs more than the imports themselves. The
script says which case it measured.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from load import all_in_one

COMMANDS = (("profile", "list"), ("deployable", "list"), ("--version",))


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", type=int, default=0, help="Busy loops to run meanwhile.")
    args = parser.parse_args()
    acceleron = str(Path(sys.executable).parent / "acceleron")
    cached = "no bytecode cache" if os.environ.get("PYTHONDONTWRITEBYTECODE") else "bytecode cached"
    print(f"{os.cpu_count()} cores, {args.busy} busy loop(s), {cached}")
    with all_in_one() as url:
        env = {**os.environ, "ACCELERON_URL": url}
        loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"])
                 for _ in range(args.busy)]  # fmt: skip
        try:
            for command in COMMANDS:
                argv = [acceleron, *command]
                timed(argv, env)  # the first run may write the bytecode cache
                times = sorted(timed(argv, env) for _ in range(args.runs))
                print(
                    f"acceleron {' '.join(command):<16} median {statistics.median(times):.3f} s"
                    f"   min {times[0]:.3f} s   max {times[-1]:.3f} s   ({args.runs} runs)"
                )
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()


if __name__ == "__main__":
    main()
