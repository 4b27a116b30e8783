"""Each trial's wall time at each GPU count of a `gridbench scale` run, matched configuration by configuration.

    python benchmarks/trial_walls.py LOG        # scale's terminal output, e.g. docs/results/h200x4-scale-issue28/a/log.txt

Reads the `done ...: ... wall X s on gpu:N` line each trial prints (a line may wrap) and splits
the log into counts at the progress bar each count's search ends with, in the order the counts
ran. Prints per count its trials' summed and median wall time; then per configuration its wall
at each count and the difference from the first count; then, per later count, the differences
sorted. Reads the log only: nothing is run again.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

DONE = re.compile(r"^done (?P<config>.+?) #(?P<repeat>\d+):.*?\bwall\s+(?P<wall>[\d.eE+-]+) s on ", re.S | re.M)
COUNT_END = re.compile(r"^trials ━.*$", re.M)  # the progress bar's last line, after each count's search


def counts(log: str) -> list[dict[str, float]]:
    """Per count, in the order run: each trial's wall time by its configuration and repeat."""
    found = []
    for part in COUNT_END.split(log):
        walls = {f"{m['config']} #{m['repeat']}": float(m["wall"]) for m in DONE.finditer(part)}
        if walls:
            found.append(walls)
    return found


def report(walls: list[dict[str, float]]) -> str:
    lines = []
    for index, count in enumerate(walls, 1):
        lines.append(
            f"count {index}: {len(count)} trials, summed wall {sum(count.values()):.3f} s, "
            f"median wall {statistics.median(count.values()):.3f} s"
        )
    first = walls[0]
    lines.append("\nwall s at each count (difference from count 1)")
    for config in first:
        cells = [f"{first[config]:g}"] + [
            f"{count[config]:g} ({count[config] - first[config]:+.2f})" if config in count else "-"
            for count in walls[1:]
        ]
        lines.append(f"{config}: " + " | ".join(cells))
    for index, count in enumerate(walls[1:], 2):
        differences = sorted(count[c] - first[c] for c in count if c in first)
        lines.append(f"\ncount {index} less count 1, sorted: " + " ".join(f"{d:+.2f}" for d in differences))
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python benchmarks/trial_walls.py LOG   (a `gridbench scale` run's terminal output)")
    walls = counts(Path(sys.argv[1]).read_text(encoding="utf-8"))
    if not walls:
        sys.exit(f"{sys.argv[1]}: no `done ... wall X s` lines: not a `gridbench scale` log")
    print(report(walls), end="")


if __name__ == "__main__":
    main()
