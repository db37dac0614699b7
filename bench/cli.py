"""How long a CLI command takes from the shell's point of view: a new ``acceleron``
process, its imports, its request to the all-in-one, its answer, its exit.

Starts Acceleron the way ``make run`` does, then times ``--runs`` runs of each
command: wall time (start to exit) and CPU time (user + system, what the command
itself costs, whatever else the machine does). ``--busy N`` keeps N busy loops running
meanwhile, as other work does on a shared machine.

    .venv/bin/python bench/cli.py [--runs 20] [--busy 1] [--program PATH] [--baseline PATH]

``--baseline`` times another ``acceleron`` program (an older checkout's) in the same
loop, a run of each in turn, so that both meet the same load: on a shared machine that
is the only fair comparison.

Without bytecode (a venv installed without it, and PYTHONDONTWRITEBYTECODE set) every
run compiles every module it imports, which costs more than the imports themselves;
``make`` installs the venv with its bytecode. The script says which case it measured.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from load import all_in_one

COMMANDS = (("profile", "list"), ("deployable", "list"), ("--version",))


def precompiled() -> bool:
    """Whether the libraries come with their bytecode (``uv pip install --compile-bytecode``
    or pip's default) or Python may write it; else every run compiles every module."""
    import keystoneauth1.session

    cache = importlib.util.cache_from_source(keystoneauth1.session.__file__)
    return Path(cache).exists() or not os.environ.get("PYTHONDONTWRITEBYTECODE")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--busy", type=int, default=0, help="Busy loops to run meanwhile.")
    parser.add_argument(
        "--program",
        default=str(Path(sys.executable).parent / "acceleron"),
        help="The acceleron program to time (another version's).",
    )
    parser.add_argument("--baseline", help="Another acceleron program, timed in turn with it.")
    args = parser.parse_args()
    programs = [args.program, *([args.baseline] if args.baseline else [])]
    cached = "bytecode precompiled" if precompiled() else "no bytecode: compiled on every run"
    print(
        f"{os.cpu_count()} cores, {args.busy} busy loop(s), {cached}, load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    with all_in_one() as url:
        env = {**os.environ, "ACCELERON_URL": url}
        loops = [
            subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(args.busy)
        ]
        try:
            for command in COMMANDS:
                for program in programs:  # the first run may write the bytecode cache
                    timed([program, *command], env)
                runs = [[timed([p, *command], env) for p in programs] for _ in range(args.runs)]
                for index, program in enumerate(programs):
                    walls, cpus = zip(*(run[index] for run in runs), strict=True)
                    which = "" if len(programs) == 1 else f"  [{program}]"
                    print(
                        f"acceleron {' '.join(command):<16} wall median "
                        f"{statistics.median(walls):.3f} s (min {min(walls):.3f}, max "
                        f"{max(walls):.3f})   CPU median "
                        f"{statistics.median(cpus):.3f} s   ({args.runs} runs){which}"
                    )
        finally:
            for loop in loops:
                loop.kill()
                loop.wait()


if __name__ == "__main__":
    main()
