"""What a trial costs beyond its own time: Ray Tune alone, and gridbench's search around it.

Every trial only sleeps `--trial-s` seconds; `--trials` of them run at `--concurrency`
(one core each, reused actors, Tune's loggers off), under one of three harnesses:
  - tune: a bare Tune script;
  - gridbench-memory: gridbench's run_search, recording into memory (no store);
  - gridbench-mlflow: run_search behind its journal and an MLflow SQLite store, as a search runs.
The overhead ratio is the makespan over the ideal (trials x trial-s / concurrency), as a
gridbench search reports it; "per trial" spreads the gap over the trials (Tune's start
included). `--env KEY=VALUE` tries a Tune setting.

    python benchmarks/tune_overhead.py --harness tune|gridbench-memory|gridbench-mlflow [--trials 60]
        [--trial-s 0.5] [--concurrency 2] [--env KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def sleeping_trial(config, context):
    """gridbench's trial, reduced to its sleep (defined here: Ray pickles it by value from __main__)."""
    from gridbench.tracking.schema import TrialStatus
    from gridbench.trial.outcome import TrialOutcome

    started = time.time()
    time.sleep(context.params["trial_s"])
    metrics = {"steady_epoch_s": 0.01, "train_epochs_s": 0.0, "test_accuracy": 0.5}
    outcome = TrialOutcome(TrialStatus.FINISHED, started, time.time(), 0, metrics, {"device.actual": "cpu:0"})
    outcome.metrics["trial_wall_s"] = outcome.ended_at - started
    return outcome


def gridbench_makespan(args) -> float:
    from gridbench.gridsearch import SearchOptions, plan_search, run_search
    from gridbench.spec import load_spec
    from gridbench.tracking.memory_recorder import MemoryRecorder

    spec = load_spec("digits")
    grid = {"hidden_units": tuple(range(8, 8 + args.trials)), "learning_rate": (0.01,)}
    spec = dataclasses.replace(spec, grid=grid, params={**spec.params, "trial_s": args.trial_s})
    store = f"sqlite:///{tempfile.mkdtemp()}/mlflow.db"
    options = SearchOptions(backend="tensorflow", cpus_per_trial=1, cpus=args.concurrency, tracking_uri=store)
    plan = plan_search(spec, options)
    memory = {"open_recorder": lambda uri, name: MemoryRecorder(name)} if args.harness == "gridbench-memory" else {}
    return run_search(plan, runner=sleeping_trial, **memory).summary.makespan_s


def tune_makespan(args) -> float:
    import ray
    from ray import tune

    ray.init(address="local", num_cpus=args.concurrency, include_dashboard=False, log_to_driver=False)

    def trial(config):
        time.sleep(args.trial_s)
        tune.report({"slept": args.trial_s})

    tuner = tune.Tuner(
        tune.with_resources(trial, {"cpu": 1}),
        param_space={"i": tune.grid_search(list(range(args.trials)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=args.concurrency, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0),
    )
    start = time.perf_counter()
    tuner.fit()
    makespan = time.perf_counter() - start
    ray.shutdown()
    return makespan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--harness", choices=("tune", "gridbench-memory", "gridbench-mlflow"), default="tune")
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--trial-s", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    for setting in args.env:
        key, value = setting.split("=", 1)
        os.environ[key] = value

    makespan = tune_makespan(args) if args.harness == "tune" else gridbench_makespan(args)
    ideal = args.trials * args.trial_s / args.concurrency
    gap = (makespan - ideal) * args.concurrency / args.trials
    settings = " ".join([args.harness, *args.env])
    print(
        f"{settings}: {args.trials} trials of {args.trial_s} s at concurrency {args.concurrency}: makespan "
        f"{makespan:.1f} s, ideal {ideal:.1f} s, overhead ratio {makespan / ideal:.2f}, {gap:.3f} s per trial"
    )


if __name__ == "__main__":
    main()
