"""A pilot's projection against the whole pair it projected (benchmarks/pilot_check.sh's output).

    python benchmarks/pilot_table.py OUTDIR GRID [...]      e.g. mlp cnn
    python benchmarks/pilot_table.py OUTDIR GRID GRID@OTHER_OUTDIR   a grid checked on another machine, its own store

For each grid, the pilots (NAME-pilot.ids: CPU, GPU) are projected to the whole search they
stand for, and set against the whole pair as measured (NAME-whole.ids): each device's
makespan and whole command, the speedup and the cost ratio; each figure's error, and whether
the measurement fell inside the interval. Then the pilot command's time against the whole
pair's, as `/usr/bin/time` measured each from outside.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from gridbench.comparison import pilot, spread
from gridbench.comparison.pairing import search_price
from gridbench.comparison.prices import PriceTable
from gridbench.comparison.projection import ratio_interval
from gridbench.tracking import read_search, schema


def _command_s(path: Path) -> float:
    return float(re.findall(r"whole command ([\d.]+) s$", path.read_text(), re.M)[-1])


def whole_outputs(out: Path, name: str) -> list[Path]:
    """The whole pair's output: one `--device both` command, or two (NAME-whole-cpu, NAME-whole-gpu) where the pair
    was longer than one device call."""
    one = out / f"{name}-whole.txt"
    return [one] if one.exists() else [out / f"{name}-whole-{device}.txt" for device in ("cpu", "gpu")]


def whole_ids(out: Path, name: str) -> list[str]:
    return [i for path in whole_outputs(out, name) for i in path.with_suffix(".ids").read_text().split()]


ERRORS: list[float] = []  # every row's relative error, for the summary line
OUTSIDE: list[str] = []  # the rows whose measurement fell outside their interval


def _row(name: str, figure: str, point: float, low, high, value: float) -> str:
    inside = "-" if low is None else ("yes" if low <= value <= high else "**no**")
    ERRORS.append((point - value) / value)
    if inside == "**no**":
        OUTSIDE.append(f"{name} {figure}")
    shown = f"{point:.4g}" + ("" if low is None else f" [{low:.4g}-{high:.4g}]")
    return f"| {name} | {figure} | {shown} | {value:.4g} | {(point - value) / value:+.1%} | {inside} |"


def store_uri(out: Path) -> str:
    """The check's store, OUTDIR/work/mlflow.db; refused if missing (opening it would create an empty one)."""
    path = out / "work" / "mlflow.db"
    if not path.exists():
        sys.exit(f"{path}: no store; gunzip the check's store.db.gz there first")
    return f"sqlite:///{path}"


def main(first_out: Path, grids: list[str]) -> None:
    prices = PriceTable.load()
    print("| grid | figure | projected [95%] | measured | error | inside |\n|---|---|---:|---:|---:|---|")
    for grid in grids:
        name, _, elsewhere = grid.partition("@")
        out = Path(elsewhere) if elsewhere else first_out
        uri = store_uri(out)
        pilots = [read_search(uri, i) for i in (out / f"{name}-pilot.ids").read_text().split()]
        wholes = [read_search(uri, i) for i in whole_ids(out, name)]
        found = [pilot.project(p, search_price(p, prices), spread.run_to_run(p)) for p in pilots]
        for p, w in zip(found, wholes):
            device = p.pilot.tags[schema.DEVICE].upper()
            m = p.makespan_s
            print(_row(name, f"{device} makespan s", m.value, m.low, m.high, w.metrics[schema.MAKESPAN_S]))
            print(_row(name, f"{device} whole command s", p.whole_command_s, None, None,
                       w.metrics[schema.WHOLE_COMMAND_S]))  # fmt: skip
        sds = [None if p.makespan_s.low is None else (p.makespan_s.high - p.makespan_s.value) / 1.96 for p in found]
        speedup = ratio_interval([p.makespan_s.value for p in found], sds)
        measured = wholes[0].metrics[schema.MAKESPAN_S] / wholes[1].metrics[schema.MAKESPAN_S]
        print(_row(name, "speedup", speedup.value, speedup.low, speedup.high, measured))
        costs = [w.metrics[schema.MAKESPAN_S] / 3600 * search_price(w, prices) for w in wholes]
        print(_row(name, "cost ratio", found[0].cost / found[1].cost, None, None, costs[0] / costs[1]))
        pilot_s, whole_s = _command_s(out / f"{name}-pilot.txt"), sum(map(_command_s, whole_outputs(out, name)))
        print(f"| {name} | pilot command / whole pair's | {pilot_s:.1f} s / {whole_s:.1f} s | "
              f"{pilot_s / whole_s:.1%} | | |")  # fmt: skip
        print(f"<!-- {name}: {pilot.verdict(*found)} -->")
    mean = sum(abs(e) for e in ERRORS) / len(ERRORS)
    print(
        f"\nmean absolute error {mean:.1%} over {len(ERRORS)} figures, largest {max(map(abs, ERRORS)):.1%}; "
        f"outside their interval: {', '.join(OUTSIDE) or 'none'}"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
