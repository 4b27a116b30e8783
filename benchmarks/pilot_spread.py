"""How far a pilot's one-off parts stand from its whole search's (gridbench/data/pilot_spread.toml).

    python benchmarks/pilot_spread.py PILOT.txt:WHOLE.txt [PILOT.txt:WHOLE.txt ...]

Each argument names the raw output of a `search ... --device both --pilot` and of the whole
`search ... --device both` it projects (benchmarks/pilot_check.sh). A pilot's projection holds its
one-off parts (start-up, compiling, the workers' start, the end) as the pilot measured them, but the
whole search pays them in another order: a pilot's trial meets a new program each time, where a whole
search runs trials of programs already compiled while the rest compile. For each device, over the
pairs, the relative difference r = (whole - pilot) / pilot of the one-off parts; the standard deviation
of the pilot's as an estimate of the whole's is sqrt(mean(r^2)). It prints each pair and the TOML.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from run_spread import accounts, split


def main(pairs: list[str]) -> None:
    found: dict[str, list[float]] = {"cpu": [], "gpu": []}
    for pair in pairs:
        pilot, whole = (accounts(Path(p)) for p in pair.split(":"))
        for device, a, b in zip(("cpu", "gpu"), pilot, whole):
            (one_a, _), (one_b, _) = split(a), split(b)
            found[device].append((one_b - one_a) / one_a)
            print(f"# {device} {pair}: one-off parts {one_a:.2f} s in the pilot, {one_b:.2f} s in the whole search "
                  f"({found[device][-1]:+.1%})")  # fmt: skip
    for device, differences in found.items():
        if differences:
            spread = math.sqrt(sum(r * r for r in differences) / len(differences))
            print(f"[{device}]\none_off = {spread:.3f}\npairs = {len(differences)}")


if __name__ == "__main__":
    main(sys.argv[1:])
