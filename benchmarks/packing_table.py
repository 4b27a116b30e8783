"""benchmarks/gpu_packing.py's table, from the packing.json files it wrote: one row per run.

    python benchmarks/packing_table.py DIR/packing.json [...]

Per run, the median over its trials [min-max] of the steady epoch, the warm-up epoch and the
trial's wall time, the accuracy's range, the mean of the trials' GPU utilisation, the makespan and
the overhead ratio, as gpu_packing.py prints them after a run. Reads the files only: a table
of runs kept earlier is rebuilt from their raw figures, with nothing run again.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

HEADER = (
    "| device | backend | loop | compile cache | trials at once | CPUs/trial "
    "| steady s/epoch per trial, median [min-max] "
    "| warm-up epoch s | trial wall s | test accuracy | GPU util % (mean) | makespan s | overhead ratio |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
)


def spread(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def row_line(row: dict) -> str:
    trials = row["trials"]
    accuracy = [t["test_accuracy"] for t in trials]
    util = [t["gpu_util_pct_mean"] for t in trials if t["gpu_util_pct_mean"] is not None]
    util_text = f"{statistics.fmean(util):.0f}" if util else "-"
    cache = "on" if row["compile_cache"] and row["backend"] == "jax" else "off"
    return (
        f"| {row['device']} | {row['backend']} | {row['loop']} | {cache} | {row['concurrency']} "
        f"| {row['cpus_per_trial']} "
        f"| {spread([t['steady_epoch_s'] for t in trials], 4)} | {spread([t['warmup_epoch_s'] for t in trials], 2)} "
        f"| {spread([t['trial_wall_s'] for t in trials], 2)} "
        f"| {min(accuracy, default=0):.4f}-{max(accuracy, default=0):.4f} "
        f"| {util_text} | {row['makespan_s']:.1f} | {row['overhead_ratio']:.2f} |"
    )


def table(rows: list[dict]) -> str:
    return HEADER + "\n".join(row_line(row) for row in rows) + "\n"


def main() -> None:
    rows = [row for path in sys.argv[1:] for row in json.loads(Path(path).read_text())["runs"]]
    if not rows:
        sys.exit("usage: python benchmarks/packing_table.py DIR/packing.json [...]")
    print(table(rows), end="")


if __name__ == "__main__":
    main()
