"""A search of 1,000 configurations on a local SQLite store, measured: issue 31's load benchmark.

    python benchmarks/load.py --out DIR [--configs 1000] [--epochs 2] [--backend NAME]

Runs the digits grid (`--configs` configurations: hidden_units x learning_rate, as
benchmarks/store_outage.py builds it; `--cpus-per-trial 1`, so one trial per core) once,
into a fresh `sqlite:///DIR/mlflow.db` with its journal beside it. Every figure is read
back from the store: FINISHED children, duplicates (children beyond one per configuration
and repeat), the parent's makespan, overhead ratio, and what recording cost
(journal_write_s, store_write_s, store_lag_max_s, store_retries).

Writes DIR/load.md (the table and the command), DIR/result.json, and the search's raw
output (search.out, search.err). Starts no server; stops nothing it did not start.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT.parent))

from store_outage import grid_axes, read_back  # noqa: E402


def run(args) -> dict:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    store = out / "mlflow.db"
    if store.exists():
        raise SystemExit(f"{store} exists: give an empty --out directory")
    units, rates = grid_axes(args.configs)
    command = [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", f"sqlite:///{store}",
               "--cpus-per-trial", "1", "--set", f"epochs={args.epochs}", "--max-trials", str(args.configs),
               "--grid", "hidden_units=" + ",".join(map(str, units)),
               "--grid", "learning_rate=" + ",".join(map(str, rates))]  # fmt: skip
    if args.backend:
        command += ["--backend", args.backend]
    result: dict = {"command": " ".join(["python", *command[1:]]), "configs": args.configs, "cores": os.cpu_count()}
    with open(out / "search.out", "w") as stdout, open(out / "search.err", "w") as stderr:
        started = time.monotonic()
        search = subprocess.run(command, cwd=out, stdout=stdout, stderr=stderr)
        result["search_exit"] = search.returncode
        result["search_wall_s"] = time.monotonic() - started
    result.update(read_back(store))
    (out / "result.json").write_text(json.dumps(result, indent=2))
    return result


def table(result: dict) -> str:
    rows = [
        ("children FINISHED", f"{result['children_finished']} of {result['configs']}"),
        ("duplicates", str(result["duplicates"])),
        ("parent status", result["parent_status"]),
        ("makespan (s)", _num(result.get("makespan_s"), 1)),
        ("overhead ratio", _num(result.get("overhead_ratio"), 3)),
        ("journal fsyncs, in the makespan (s)", _num(result.get("journal_write_s"), 2)),
        ("store writes, off Tune's thread (s)", _num(result.get("store_write_s"), 1)),
        ("longest wait, journal to store (s)", _num(result.get("store_lag_max_s"), 2)),
        ("store retries", _num(result.get("store_retries"), 0)),
        ("search exit", str(result["search_exit"])),
        ("whole command (s)", _num(result.get("search_wall_s"), 1)),
    ]
    return "\n".join(["| | value |", "|---|---:|", *(f"| {label} | {value} |" for label, value in rows)])


def _num(value, digits: int) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path, help="an empty directory for the store and raw output")
    parser.add_argument("--configs", type=int, default=1000, help="grid size (default 1000)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--backend", help="Keras backend (default: gridbench's choice, $KERAS_BACKEND)")
    args = parser.parse_args()
    result = run(args)
    text = f"# Load: {args.configs} configurations\n\n    {result['command']}\n\n{table(result)}\n"
    (args.out / "load.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
