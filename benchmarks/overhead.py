"""Harness overhead of a whole search, from one run of the `digits` experiment.

    python benchmarks/overhead.py [--cpus-per-trial N] [--repeats N]

Prints the overhead ratio, makespan / (sum of trial wall times / concurrency),
where 1.00 would mean Ray Tune and MLflow cost nothing beyond the trials, and the
time from this command's start (process creation) to the first trial starting.
The MLflow store is a temporary SQLite file, removed afterwards.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gridbench.gridsearch import SearchOptions, plan_search, run_search  # noqa: E402
from gridbench.spec import load_spec  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="digits")
    parser.add_argument("--cpus-per-trial", type=int)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        spec = load_spec(args.experiment).with_repeats(args.repeats)
        plan = plan_search(
            spec, SearchOptions(cpus_per_trial=args.cpus_per_trial, tracking_uri=f"sqlite:///{tmp}/mlflow.db")
        )
        started = time.perf_counter()
        result = run_search(plan)
        search_s = time.perf_counter() - started

    s = result.summary
    walls = [t.metrics["trial_wall_s"] for t in result.trials]
    imports = [t.metrics.get("import_s", 0.0) for t in result.trials]
    print(
        f"experiment            {spec.name}: {s.trials_total} trials, {plan.cpus_per_trial} CPU(s) per trial, concurrency {s.concurrency}"
    )
    print(f"trials finished       {s.trials_finished} of {s.trials_total}")
    print(f"makespan              {s.makespan_s:8.2f} s   (Tuner.fit)")
    print(
        f"sum of trials / conc. {s.ideal_makespan_s:8.2f} s   (trial wall times: median {statistics.median(walls):.2f} s, max {max(walls):.2f} s)"
    )
    print(f"overhead ratio        {s.overhead_ratio:8.2f}     (makespan / (sum of trial wall times / concurrency))")
    print(
        f"framework imports     {sum(imports):8.2f} s   (inside trials; {sum(i > 1 for i in imports)} worker(s) paid it)"
    )
    print(f"Ray start             {s.ray_start_s:8.2f} s")
    print(f"time to first trial   {s.time_to_first_trial_s:8.2f} s   (command start to first trial start)")
    print(f"whole search call     {search_s:8.2f} s   (Ray start, MLflow run, Tuner.fit, shutdown)")


if __name__ == "__main__":
    main()
