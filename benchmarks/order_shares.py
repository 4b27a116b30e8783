"""How evenly each trial order shares a grid's trials out over its slots, by one `scale` count's trial walls.

    python benchmarks/order_shares.py WALLS [WALLS...] [--slots 2,3,4]   # trial_walls.py's output, e.g.
        # docs/results/around-training/h200x4-f361cd3/scale/a-on-walls.txt

Takes each trial's wall at the first count (the first number of each configuration's line) as its seconds, and
prints per slot count the fullest slot's seconds for three shares: longest first (each slot, as it frees, takes
the longest trial left: `scale`'s rule until 2026-11-28), gridbench's share (gridbench.gridsearch.trial_order:
two heuristics, improved), and the best share HiGHS finds through scipy.optimize.milp (a reference: one 0/1
variable per trial and slot; tried in the command on 2026-11-28, where it took 1.4 s on 4 H100s). Also the slots'
mean, which no share can beat, and each share's planning time. Reads the files only: nothing is run.
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from gridbench.gridsearch.trial_order import fullest, longest_first_shares, share_out

FIRST_WALL = re.compile(r"^.+ #\d+: (?P<wall>[\d.]+)", re.M)


def highs_shares(seconds: list[float], slots: int) -> list[list[int]]:
    """The share whose fullest slot is shortest, as HiGHS finds it in 10 s at most (its best so far at the limit)."""
    count, width = len(seconds), len(seconds) * slots + 1  # x[i * slots + j]: trial i on slot j; last: the fullest
    once, fill = np.zeros((count, width)), np.zeros((slots, width))
    for i, s in enumerate(seconds):
        once[i, i * slots : (i + 1) * slots] = 1
        fill[:, i * slots : (i + 1) * slots] = np.eye(slots) * s
    fill[:, -1] = -1
    upper = np.ones(width)
    upper[-1] = np.inf
    objective = np.zeros(width)
    objective[-1] = 1
    result = milp(
        objective,
        constraints=[LinearConstraint(once, 1, 1), LinearConstraint(fill, -np.inf, 0)],
        integrality=np.r_[np.ones(width - 1), 0],
        bounds=Bounds(np.zeros(width), upper),
        options={"time_limit": 10.0},
    )
    if result.x is None:
        raise SystemExit(f"HiGHS found no share of {len(seconds)} trials on {slots} slots: {result.message}")
    chosen = result.x[:-1].reshape(count, slots).argmax(axis=1)
    return [[i for i in range(count) if chosen[i] == j] for j in range(slots)]


def timed(share, seconds: list[float], slots: int) -> tuple[float, float]:
    """`share(seconds, slots)`'s fullest slot, and the seconds it took to find it."""
    started = time.perf_counter()
    found = share(seconds, slots)
    return fullest(found, seconds), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("walls", nargs="+", type=Path)
    parser.add_argument("--slots", default="2,3,4")
    args = parser.parse_args()
    for path in args.walls:
        seconds = [float(m["wall"]) for m in FIRST_WALL.finditer(path.read_text())]
        print(f"{path}: {len(seconds)} trials, {sum(seconds):.3f} s in all")
        print(f"{'slots':>5} {'mean':>8} {'longest first':>22} {'gridbench':>22} {'HiGHS':>22}")
        for slots in map(int, args.slots.split(",")):
            cells = [timed(share, seconds, slots) for share in (longest_first_shares, share_out, highs_shares)]
            text = " ".join(f"{s:>9.3f} s in {t:>7.4f} s" for s, t in cells)
            print(f"{slots:>5} {sum(seconds) / slots:>8.3f} {text}")


if __name__ == "__main__":
    main()
