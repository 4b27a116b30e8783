"""How far a pilot's one-off parts stand from its whole search's (gridbench/data/pilot_spread.toml).

    python benchmarks/pilot_spread.py PILOT.txt:WHOLE.txt [PILOT.txt:WHOLE.txt ...]

Each argument names the raw output of a `search ... --device both --pilot` and of the whole
`search ... --device both` it projects (benchmarks/pilot_check.sh; a WHOLE of two commands, one per
device, as WHOLE_CPU.txt+WHOLE_GPU.txt). A pilot's projection holds its one-off parts (compiling, the
workers' start and the rest paid once) as the pilot measured them, but the whole search pays them in
another order: a pilot's trial meets a new program each time, where a whole search runs trials of
programs already compiled while the rest compile. The projection is of a makespan, so only the
one-off parts inside it count: the account's one-off parts less what the whole command spent
outside the makespan (start-up before the first trial, the end). For each device, over the pairs,
the relative difference r = (whole - pilot) / pilot of those parts; the standard deviation of the
pilot's as an estimate of the whole's is sqrt(mean(r^2)). It prints each pair and the TOML.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

from run_spread import accounts, split

MAKESPAN = re.compile(r"The search took ([\d.]+) s \(makespan\)|\bmakespan ([\d.]+) s for \d+ trials")  # either era
WHOLE = re.compile(r"where the whole command's ([\d.]+) s went", re.I)


def _makespans(text: str) -> list[str]:
    return [new or old for new, old in MAKESPAN.findall(text)]


def in_makespan(path: Path) -> list[float]:
    """Each search's one-off parts inside its makespan, in the order the output printed them (CPU, GPU)."""
    text = " ".join(path.read_text(encoding="utf-8", errors="replace").split())  # the terminal wrapped lines
    found = []
    for parts, makespan, whole in zip(accounts(path), _makespans(text), WHOLE.findall(text), strict=True):
        one_off, _ = split(parts)
        found.append(one_off - (float(whole) - float(makespan)))
    return found


def main(pairs: list[str]) -> None:
    found: dict[str, list[float]] = {"cpu": [], "gpu": []}
    for pair in pairs:
        pilot, whole = pair.split(":")
        mine = in_makespan(Path(pilot))
        theirs = [value for part in whole.split("+") for value in in_makespan(Path(part))]
        for device, a, b in zip(("cpu", "gpu"), mine, theirs, strict=True):
            found[device].append((b - a) / a)
            print(f"# {device} {pair}: one-off parts inside the makespan {a:.2f} s in the pilot, {b:.2f} s in the "
                  f"whole search ({found[device][-1]:+.1%})")  # fmt: skip
    for device, differences in found.items():
        if differences:
            spread = math.sqrt(sum(r * r for r in differences) / len(differences))
            print(f"[{device}]\none_off = {spread:.3f}\npairs = {len(differences)}")


if __name__ == "__main__":
    main(sys.argv[1:])
