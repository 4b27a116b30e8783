"""When each search's first worker started, imported ahead and took its first trial, from an MLflow store (issue
"Everything around the training"): whether --prestart-workers' imports are on the way to the first trial.

    python benchmarks/prestart_timeline.py STORE_URI

Per search (oldest first): whether workers were started ahead and how Tune's actors got theirs, how many were asked
for and began before the trials' launch, Ray's start, the backends' probe, the start-up
(command to first trial), and, for the first trial's worker, seconds from the driver's process start to the worker
process' start, to its imports ahead (start and end) and to the trial's own start (its run's). Reads the store only.
"""

from __future__ import annotations

import sys

from mlflow import MlflowClient

SEARCH_METRICS = (
    "ray_start_s",
    "backend_probe_s",
    "startup_s",
    "import_ahead_s",
    "import_ahead_after_launch_s",
    "workers_prestarted",
    "workers_started_ahead",
)
WORKER_TIMES = ("worker.process_started_at", "worker.import_ahead_started_at", "worker.import_ahead_ended_at")
DRIVER_STARTED = "gridbench.driver.started"  # the driver's process start (Unix time), a tag of the parent run


def main(uri: str) -> None:
    client = MlflowClient(uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=5000)
    parents = sorted((r for r in runs if "mlflow.parentRunId" not in r.data.tags), key=lambda r: r.info.start_time)
    for parent in parents:
        origin = float(parent.data.tags.get(DRIVER_STARTED, parent.info.start_time / 1000))
        metrics = parent.data.metrics
        line = " ".join(f"{name} {metrics[name]:.2f}" for name in SEARCH_METRICS if name in metrics)
        tags = parent.data.tags
        ways = f"prestart_workers {tags.get('prestart_workers', '?')} trial_workers {tags.get('trial_workers', '?')}"
        print(f"{parent.info.run_id} {ways}: {line}")
        trials = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        first = min(trials, key=lambda r: r.info.start_time, default=None)
        if first is not None:
            times = {name: first.data.metrics[name] - origin for name in WORKER_TIMES if name in first.data.metrics}
            times["trial started"] = first.info.start_time / 1000 - origin
            print("  first trial, s after the driver's start: " + ", ".join(f"{k} {v:+.2f}" for k, v in times.items()))


if __name__ == "__main__":
    main(sys.argv[1])
