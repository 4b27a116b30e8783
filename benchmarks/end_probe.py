"""A search's end, part by part: `python benchmarks/end_probe.py search ...` runs gridbench's command line as typed,
and prints to stderr, once the search's Ray is stopped (RaySession.stop), what Ray's shutdown took, which of the
search's processes were still alive after it (their titles) and what ending them took (OwnProcesses.end).

    cd CHECKOUT && PYTHONPATH=$PWD python /path/to/benchmarks/end_probe.py search digits --tracking-uri URI

Each line starts with "end probe:". The command's own output and exit status are unchanged.
"""

from __future__ import annotations

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


def main() -> None:
    import ray

    _timed(ray, "shutdown")
    _timed(lifecycle.OwnProcesses, "end", _alive)
    from gridbench.cli import run

    sys.argv[0] = "gridbench"
    run()


if __name__ == "__main__":
    main()
