"""`python one_worker.py PROGRAM [ARG ...] [-- PROGRAM [ARG ...]] ...`: each program of this folder in turn, in this
one process, as a Ray worker trains trial after trial; prints `== PROGRAM` before each one's lines (test_workloads).

Keras, JAX and gridbench are imported, and JAX's CPU backend started, once for them all: test_workloads' three
tests of the JAX programs took 47.4 CPU s with a process each, 31.7 with one (pytest -n 0, 2 cores, 2026-11-26).
Programs that patch Keras or clear the kept programs (retraced_fit_programs.py) go last.
"""

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def programs(argv: list[str]) -> list[list[str]]:
    """The command line split at each `--`: a program's name and its arguments, for each."""
    runs, current = [], []
    for word in argv:
        if word == "--":
            runs.append(current)
            current = []
        else:
            current.append(word)
    return [run for run in runs + [current] if run]


if __name__ == "__main__":
    for name, *arguments in programs(sys.argv[1:]):
        print(f"== {name}", flush=True)
        sys.argv = [str(HERE / name), *arguments]
        runpy.run_path(str(HERE / name), run_name="__main__")
        sys.stdout.flush()
