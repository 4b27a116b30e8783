"""The verdict's projection against the pair it projected (benchmarks/verdict_check.sh's output).

    python benchmarks/verdict_table.py OUTDIR WORKLOAD:LONG_EPOCHS [...]     e.g. mlp:8 cnn:9 digits:30

For each workload, the source pair (NAME-b) is projected to the long pair's epochs with
`gridbench compare B_CPU B_GPU --project epochs=N --format json`, and the long pair
(NAME-long) is compared as run. Each figure (the CPU and GPU makespans, the speedup, the
cost ratio) is printed with the projection's point, its 95% interval, the measurement,
the point's error and whether the measurement fell inside the interval. The JSON documents
are written beside the outputs (NAME-projected.json, NAME-measured.json).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def compare_json(out: Path, ids: list[str], *extra: str) -> dict:
    uri = f"sqlite:///{out / 'work' / 'mlflow.db'}"
    command = [sys.executable, "-m", "gridbench", "compare", *ids, "--tracking-uri", uri, "--format", "json",
               "--no-log", *extra]  # fmt: skip
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def figures(document: dict, row_label: str) -> dict[str, tuple]:
    """(point, low, high) of each figure at the row: the makespans, the speedup, the cost ratio."""
    row = next(r for r in document["pairings"][0]["projection"]["rows"] if r["label"] == row_label)
    (cpu, gpu), speedup = (s["makespan_s"] for s in row["searches"]), row["speedup"]
    return {
        "CPU makespan s": (cpu["value"], cpu["low"], cpu["high"]),
        "GPU makespan s": (gpu["value"], gpu["low"], gpu["high"]),
        "speedup (makespans)": (speedup["value"], speedup["low"], speedup["high"]),
        "cost ratio": (row["cost_ratio"], None, None),
    }


def main(out: Path, workloads: list[str]) -> None:
    print("| workload | figure | projected [95%] | measured | error | inside |")
    print("|---|---|---:|---:|---:|---|")
    for item in workloads:
        name, epochs = item.split(":")
        source = (out / f"{name}-b.ids").read_text().split()
        long = (out / f"{name}-long.ids").read_text().split()
        projected = compare_json(out, source, "--project", f"epochs={epochs}")
        measured = compare_json(out, long)
        (out / f"{name}-projected.json").write_text(json.dumps(projected, indent=1))
        (out / f"{name}-measured.json").write_text(json.dumps(measured, indent=1))
        found, truth = figures(projected, "asked (--project)"), figures(measured, "as run")
        for figure, (point, low, high) in found.items():
            value = truth[figure][0]
            error = (point - value) / value
            inside = "-" if low is None else ("yes" if low <= value <= high else "**no**")
            shown = f"{point:.3g}" + ("" if low is None else f" [{low:.3g}-{high:.3g}]")
            print(f"| {name} {epochs} epochs | {figure} | {shown} | {value:.3g} | {error:+.1%} | {inside} |")
        print(f"<!-- {name}: {projected['verdict']['text']} | measured: {measured['verdict']['text']} -->")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
