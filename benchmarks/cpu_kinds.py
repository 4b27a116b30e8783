"""benchmarks/suite_cpu.py's CPU seconds by process, summed into the kinds docs/results/suite-time-2core.md shows.

    python benchmarks/cpu_kinds.py FILE [...]

Each FILE holds suite_cpu.py's output: its printed listing (`  466.8 s  28.3%   86  ray worker (trials)` lines
and the `1650.7 CPU s in 983.2 s of wall time` line, after pytest's summary line) or its JSON, one record a line.
For each listing or record: the CPU seconds of each kind, the whole, the whole less the set-up that is not the
tests (pip, the virtual environment, the docs build) and the reader itself, and that share of two cores over
the wall time (a listing's: the tests', pytest's `in N s`; a record's: its command's). A printed listing rounds
each line to 0.1 s: its whole is its own total line, "every other process" is that whole less the kinds' sums,
and a sum of its lines may differ from the same sum of unrounded readings by a few tenths. Reads the files only.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

LINE = re.compile(r"^\s+(\d+\.\d+) s\s+[\d.]+%\s+(\d+)\s+(.+?)\s*$", re.M)
TOTAL = re.compile(r"^\s+(\d+\.\d+) CPU s in (\d+\.\d+) s of wall time", re.M)
TESTS_WALL = re.compile(r"^=+ .*\bin (\d+\.\d+)s\b", re.M)
SET_UP = ("pip", "python __pip-runner__.py", "python -m ensurepip", "python -m venv", "mkdocs", "this reader")
COMMANDS = ("compare", "baseline", "report", "ui", "scale", "sync")
KINDS = {  # the page's kind: does suite_cpu.py's name belong to it
    "Ray's trial workers": lambda name: name == "ray worker (trials)",
    "the tests' own trainings and probes (python -c)": lambda name: name.startswith("python -c"),
    "Ray's Python helpers": lambda name: name.startswith("ray's python helpers:"),
    "gridbench search on the command line": lambda name: name == "gridbench search",
    "pytest's workers and main process": lambda name: name.startswith("pytest"),
    "MLflow servers": lambda name: name == "mlflow server",
    "compare, baseline, report, ui, scale, sync": lambda name: name in {f"gridbench {c}" for c in COMMANDS},
    "compiling ahead, a user's model's probe": lambda name: (
        name in ("python -m gridbench.trial.precompile", "python -m gridbench.workloads.user_probe")
    ),
    "chromium": lambda name: name == "chromium",
    "set-up left out (pip, venv, docs build) and the reader": lambda name: name in SET_UP,
}
OTHER = "every other process (Ray's GCS, watchdogs, linters, the kernel's threads, ...)"


Source = tuple[str, dict[str, float], dict[str, int], float, float | None, int]


def sources(path: Path) -> list[Source]:
    """Per listing or JSON record: its label, CPU s and processes by name, the whole, the wall time, the digits."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith(("{", "#")) and '"cpu_s"' in text:
        records = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
        return [
            (f"{path.name} record {i}", r["cpu_s"], r["processes"], sum(r["cpu_s"].values()), r["wall_s"], 2)
            for i, r in enumerate(records, 1)
        ]
    cpu = {name: float(seconds) for seconds, _, name in LINE.findall(text)}
    processes = {name: int(count) for _, count, name in LINE.findall(text)}
    tests_wall = TESTS_WALL.findall(text)
    whole = float(TOTAL.findall(text)[-1][0]) if TOTAL.search(text) else sum(cpu.values())
    return [(path.name, cpu, processes, whole, float(tests_wall[-1]) if tests_wall else None, 1)]


def report(label: str, cpu: dict[str, float], processes: dict[str, int], whole: float, wall: float | None,
           digits: int) -> str:  # fmt: skip
    seconds: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for name, value in cpu.items():
        kind = next((k for k, belongs in KINDS.items() if belongs(name)), OTHER)
        seconds[kind] += value
        counts[kind] += processes.get(name, 0)
    seconds[OTHER] = whole - sum(seconds[k] for k in KINDS)
    tests = whole - seconds[next(reversed(KINDS))]
    lines = [f"== {label}"]
    lines += [f"{seconds[k]:9.{digits}f} CPU s {counts[k]:5d} processes  {k}" for k in [*KINDS, OTHER]]
    lines.append(f"{whole:9.{digits}f} CPU s in all")
    lines.append(f"{tests:9.{digits}f} CPU s in all less the set-up and the reader")
    if wall is not None:
        lines.append(f"wall time {wall:.2f} s: {tests / (2 * wall):.1%} of two cores")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit("usage: python benchmarks/cpu_kinds.py FILE [...]   (benchmarks/suite_cpu.py's output)")
    for path in sys.argv[1:]:
        for source in sources(Path(path)):
            print(report(*source))


if __name__ == "__main__":
    main()
