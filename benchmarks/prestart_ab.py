"""Does --prestart-workers slow a search, or speed it? `search EXPERIMENT` with it on and off, alternately.

    python benchmarks/prestart_ab.py [--pairs 4] [--experiment digits] [--store DIR] [-- SEARCH_ARGS ...]
    python benchmarks/prestart_ab.py --pairs 4 -- --set epochs=2

Each run is a fresh `python -m gridbench search` command, timed from outside (its wall time, start to exit),
the two settings alternating, the first setting alternating too from pair to pair. From each run's parent run
it reads the account (whole command, start-up, workers' start), the time to the first trial and the imports
ahead. Prints one JSON line per run, then the medians and ranges per setting, and each pair's difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

FIGURES = (
    "whole_command_s",
    "account.startup_s",
    "account.worker_start_s",
    "time_to_first_trial_s",
    "makespan_s",
    "import_ahead_s",
    "import_ahead_after_launch_s",
    "workers_prestarted",
    "workers_started_ahead",
    "workers_imported_ahead",
)


def one_run(setting: str, experiment: str, store: str, extra: list[str]) -> dict:
    flag = "--prestart-workers" if setting == "on" else "--no-prestart-workers"
    command = [sys.executable, "-m", "gridbench", "search", experiment, flag, "--tracking-uri", store, *extra]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
    return {"setting": setting, "rc": done.returncode, "outside_wall_s": round(wall, 2), **latest_search(store)}


def latest_search(store: str) -> dict:
    from mlflow import MlflowClient

    client = MlflowClient(store)
    experiments = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(experiments, "tags.`gridbench.kind` = 'search'", order_by=["start_time DESC"])
    run = runs[0]
    figures = {name: round(run.data.metrics[name], 2) for name in FIGURES if name in run.data.metrics}
    trials = client.search_runs(experiments, f"tags.`mlflow.parentRunId` = '{run.info.run_id}'")
    return {
        "run_id": run.info.run_id,
        "tag": run.data.tags.get("prestart_workers"),
        "trial_workers": len({t.data.tags["pid"] for t in trials}),
        **figures,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--experiment", default="digits")
    parser.add_argument("--store", help="MLflow store's directory (default: a temporary one)")
    parser.add_argument("extra", nargs="*", help="more `search` arguments, after --")
    args = parser.parse_args()
    folder = args.store or tempfile.mkdtemp(prefix="prestart_ab_")
    os.makedirs(folder, exist_ok=True)
    store = f"sqlite:///{os.path.join(folder, 'mlflow.db')}"
    runs: list[dict] = []
    for pair in range(args.pairs):
        for setting in ("on", "off") if pair % 2 == 0 else ("off", "on"):
            runs.append(one_run(setting, args.experiment, store, args.extra))
            print(json.dumps(runs[-1]), flush=True)
    for setting in ("on", "off"):
        mine = [r for r in runs if r["setting"] == setting and r["rc"] == 0]
        print("SUMMARY " + json.dumps({"setting": setting, "runs": len(mine), **spread(mine)}), flush=True)
    ons = [r for r in runs if r["setting"] == "on"]
    offs = [r for r in runs if r["setting"] == "off"]
    differences = [round(a["outside_wall_s"] - b["outside_wall_s"], 2) for a, b in zip(ons, offs)]
    print("PAIRS on-off outside_wall_s " + json.dumps(differences), flush=True)


def spread(runs: list[dict]) -> dict:
    found = {}
    for name in ("outside_wall_s", *FIGURES):
        values = [r[name] for r in runs if name in r]
        if values:
            found[name] = [min(values), round(statistics.median(values), 2), max(values)]
    return found


if __name__ == "__main__":
    main()
