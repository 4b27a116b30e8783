"""A search's end, part by part: `python benchmarks/end_probe.py search ...` runs gridbench's command line and prints
to stderr what Ray's shutdown took, which of the search's processes were still alive after it (their titles) and what
ending them took (gridbench.gridsearch.lifecycle.OwnProcesses.end). Ray is imported before the command line starts,
so the command's start-up is not as typed; its end is.

    cd CHECKOUT && PYTHONPATH=$PWD python /path/to/benchmarks/end_probe.py search digits --tracking-uri URI

With END_PROBE_SIGTERM=1, each Ray worker left after Ray's shutdown is first sent SIGTERM alone, and the time until it
has exited (a zombie, or gone) is printed, up to 5 s, before the search's own end runs: whether a worker answers
SIGTERM, apart from how late its reaping comes. Each line starts with "end probe:". The command's own output and exit
status are unchanged.
"""

from __future__ import annotations

import os
import sys
import time

from gridbench.gridsearch import lifecycle


def _timed(owner, name: str, describe=None) -> None:
    original = getattr(owner, name)

    def timed(*args, **kwargs):
        before = describe(*args) if describe else ""
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            print(f"end probe: {name} {time.perf_counter() - start:.3f} s{before}", file=sys.stderr)

    setattr(owner, name, timed)


def _alive(processes: lifecycle.OwnProcesses) -> str:
    titles = []
    for process in processes.alive():
        try:
            titles.append(" ".join(process.cmdline()).split()[0][-40:])
        except Exception:  # noqa: BLE001 - gone meanwhile
            titles.append("?")
    return f", {len(titles)} left before it: {titles}"


def _sigterm_first(processes: lifecycle.OwnProcesses) -> None:
    import psutil

    from gridbench.gridsearch.ray_session import RAY_WORKER_MARKS

    for process in processes.alive():
        try:
            if not any(mark in part for part in process.cmdline() for mark in RAY_WORKER_MARKS):
                continue
        except psutil.Error:
            continue
        start = time.perf_counter()
        try:
            process.terminate()
            while time.perf_counter() - start < 5 and process.status() != psutil.STATUS_ZOMBIE:
                time.sleep(0.002)
            state = process.status()
        except psutil.NoSuchProcess:
            state = "gone"
        print(f"end probe: SIGTERM to {state} {time.perf_counter() - start:.3f} s", file=sys.stderr)


def main() -> None:
    import ray

    _timed(ray, "shutdown")
    _timed(lifecycle.OwnProcesses, "end", _alive)
    if os.environ.get("END_PROBE_SIGTERM") == "1":  # outside the end's timing: the end then meets what is left
        end = lifecycle.OwnProcesses.end

        def sigterm_then_end(processes, *args, **kwargs):
            _sigterm_first(processes)
            return end(processes, *args, **kwargs)

        lifecycle.OwnProcesses.end = sigterm_then_end
    from gridbench.cli import run

    sys.argv[0] = "gridbench"
    run()


if __name__ == "__main__":
    main()
