"""Where each worker's first trial spends its time, against the same search's later trials, read from a store (issue
"Everything around the training": the first trials at several GPUs).

    python benchmarks/first_trials.py TRACKING_URI        # every search in the store, oldest first

Per search (its scale count, where `gridbench scale` ran it): each worker's first trial, by configuration, with its
wall time and the parts the trial recorded (seconds): its worker's setup hook before it, with the device's start in
it (--prestart-workers: outside the trial's wall), the process's setup before its imports (NVML's start
included), imports in the trial, the device's start and the data's read on threads of their own (the read from the
hook, where it began there), and what the
trial still waited for each (device_start_s, data_read_s, data_wait_s, device_wait_s), setup (data, model and its
first transfer), its program (compile_s: loaded, compiled or reused), the first epoch's excess over a steady one,
fit outside its epochs, evaluation, and what is left (wall less those and its epochs). Then the same parts as the
median of the search's later trials. Reads the store only: nothing is run again.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from gridbench.tracking import schema

CONFIG_KEYS = ("batch_size", "hidden_units", "learning_rate")  # how a first trial is named
PARTS = (
    ("hook", schema.WORKER_IMPORT_AHEAD_S),  # Ray's setup hook, before the trial (--prestart-workers)
    ("dev ahead", schema.WORKER_DEVICE_START_AHEAD_S),  # the device's start within it
    ("proc setup", schema.PROCESS_SETUP_S),
    ("import", schema.IMPORT_S),
    ("dev start", schema.DEVICE_START_S),
    ("data read", schema.DATA_READ_S),
    ("data wait", schema.DATA_WAIT_S),
    ("dev wait", schema.DEVICE_WAIT_S),
    ("setup", schema.SETUP_S),
    ("program", schema.COMPILE_S),
    ("warm-up", None),  # the first epoch's excess
    ("fit outside", schema.FIT_OUTSIDE_EPOCHS_S),
    ("eval", schema.EVAL_S),
    ("rest", None),
)


def parts(metrics: dict[str, float]) -> dict[str, float]:
    """A trial's parts, as PARTS names them; a part it did not record is 0."""
    found = {label: metrics.get(name, 0.0) for label, name in PARTS if name}
    steady, warmup = metrics.get(schema.STEADY_EPOCH_S, 0.0), metrics.get(schema.WARMUP_EPOCH_S, 0.0)
    found["warm-up"] = max(0.0, warmup - steady)
    epochs = metrics.get(schema.TRAIN_EPOCHS_S, 0.0)
    # Before the trial, or on threads of their own (the warm-up is inside the epochs)
    apart = ("hook", "dev ahead", "dev start", "data read", "warm-up")
    named = sum(v for k, v in found.items() if k not in apart)
    found["rest"] = metrics.get(schema.TRIAL_WALL_S, 0.0) - named - epochs
    return found


def row(label: str, wall: float, found: dict[str, float]) -> str:
    return f"  {label:<52} {wall:>7.3f} " + " ".join(f"{found[name]:>11.3f}" for name, _ in PARTS)


def report(client, parent) -> None:
    trials = client.search_runs(
        [parent.info.experiment_id], f"tags.`{schema.PARENT_RUN}` = '{parent.info.run_id}'", max_results=50000
    )
    by_worker = defaultdict(list)
    for trial in sorted(trials, key=lambda t: t.info.start_time):
        worker = f"{trial.data.tags.get(schema.HOST, '?')}:{trial.data.tags.get(schema.PID, '?')}"
        by_worker[worker].append(trial)
    count = parent.data.tags.get(schema.SCALE_COUNT, "-")
    print(f"\nsearch {parent.info.run_id} (scale count {count}): {len(trials)} trials, {len(by_worker)} worker(s)")
    print(f"  {'first trial of each worker':<52} {'wall':>7} " + " ".join(f"{name:>11}" for name, _ in PARTS))
    later = []
    for runs in by_worker.values():
        first, *rest = runs
        metrics = first.data.metrics
        config = " ".join(f"{k}={v}" for k, v in sorted(first.data.params.items()) if k in CONFIG_KEYS)
        print(row(config, metrics.get(schema.TRIAL_WALL_S, 0.0), parts(metrics)))
        later += [r.data.metrics for r in rest]
    if later:
        medians = {name: statistics.median(parts(m)[name] for m in later) for name, _ in PARTS}
        wall = statistics.median(m.get(schema.TRIAL_WALL_S, 0.0) for m in later)
        print(row(f"median of the {len(later)} later trials", wall, medians))


def main(uri: str) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    searches = client.search_runs(
        experiments, f"tags.`{schema.KIND}` = 'search'", order_by=["attributes.start_time ASC"], max_results=1000
    )
    for parent in searches:
        report(client, parent)


if __name__ == "__main__":
    main(sys.argv[1])
