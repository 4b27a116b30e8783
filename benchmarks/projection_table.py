"""Predicted against measured, from benchmarks/projection_check.sh's output: a Markdown table.

Usage: python benchmarks/projection_table.py OUTDIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def asked_row(projection: dict) -> dict:
    return next(row for row in projection["projection"] if row["label"] == "asked (--project)")


def main(out: Path) -> None:
    print("| size | figure | projected [95%] | measured | error |")
    print("|---|---|---:|---:|---:|")
    for name, label in (("e20", "20 epochs, 8 configurations"), ("c64", "64 configurations, 10 epochs")):
        projected, measured = load(out / f"project-{name}.json"), load(out / f"measured-{name}.json")
        if projected is None or measured is None:
            print(f"| {label} | not run | | | |")
            continue
        row = asked_row(projected)
        for index, search in enumerate(measured["searches"]):
            predicted = row["searches"][index]["makespan_s"]
            error = predicted["value"] / search["makespan_s"] - 1
            interval = f"{predicted['value']:.1f} [{predicted['low']:.1f}-{predicted['high']:.1f}]"
            print(
                f"| {label} | {search['device']} makespan s | {interval} | {search['makespan_s']:.1f} | {error:+.1%} |"
            )
        speedup, pairing = row["speedup"], measured["pairings"][0]
        error = speedup["value"] / pairing["speedup_as_run"] - 1
        interval = f"{speedup['value']:.2f}x [{speedup['low']:.2f}-{speedup['high']:.2f}]"
        print(f"| {label} | speedup as run | {interval} | {pairing['speedup_as_run']:.2f}x | {error:+.1%} |")
        print(f"| {label} | speedup steady | | {pairing['speedup_steady']:.2f}x | |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
