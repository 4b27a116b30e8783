"""The run-to-run floor (gridbench/data/run_spread.toml) from searches run twice on one machine.

    python benchmarks/run_spread.py RUN_A.txt:RUN_B.txt [RUN_A.txt:RUN_B.txt ...]

Each argument names the raw output of the same `search ... --device both` run twice on one
machine, programs in the compile cache both times. From each search's account line
("where the whole command's 47.7 s went: start-up 10.4 s, ...", the CPU search first, then
the GPU's) it takes the one-off parts (start-up, compiling, workers' start, end) and the
trials' steady cost (per-trial overhead, warm-up, training). For each device, over the
pairs: the one-off parts' standard deviation is sqrt(mean(d^2) / 2) for the differences d,
and the pace's is the same on the logs of the steady costs. It prints the TOML it finds.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

ONE_OFF = ("compile warm-up", "start-up", "compiling", "workers' start", "end")
STEADY = ("per-trial overhead", "warm-up", "training")
LINE = re.compile(r"where the whole command's [\d.]+ s went: (.*?)[;.] paid once", re.I)  # either era's wording


def accounts(path: Path) -> list[dict[str, float]]:
    """The account lines of one output, in order: {part: seconds}."""
    found = []
    text = " ".join(path.read_text(encoding="utf-8", errors="replace").split())  # the terminal wrapped long lines
    for match in LINE.finditer(text):
        parts = {}
        for item in match.group(1).split(", "):
            name, _, value = item.rpartition(" ")[0].rpartition(" ")
            parts[name] = float(value)
        found.append(parts)
    return found


def split(parts: dict[str, float]) -> tuple[float, float]:
    return sum(parts.get(p, 0.0) for p in ONE_OFF), sum(parts.get(p, 0.0) for p in STEADY)


def main(pairs: list[str]) -> None:
    differences: dict[str, list[tuple[float, float]]] = {"cpu": [], "gpu": []}
    for pair in pairs:
        first, second = (accounts(Path(p)) for p in pair.split(":"))
        for device, a, b in zip(("cpu", "gpu"), first, second):
            (one_a, steady_a), (one_b, steady_b) = split(a), split(b)
            differences[device].append((one_a - one_b, math.log(steady_a / steady_b)))
            print(f"# {device} {pair}: one-off {one_a:.2f} vs {one_b:.2f} s, steady {steady_a:.2f} vs {steady_b:.2f} s")
    for device, found in differences.items():
        if not found:
            continue
        one_off = math.sqrt(sum(d * d for d, _ in found) / len(found) / 2)
        pace = math.sqrt(sum(r * r for _, r in found) / len(found) / 2)
        print(f"[{device}]\npace = {pace:.3f}\none_off_s = {one_off:.2f}\npairs = {len(found)}")


if __name__ == "__main__":
    main(sys.argv[1:])
