"""The `mnist` grid at several trials per GPU, and on the machine's CPU cores, in one run.

    python benchmarks/gpu_packing.py --out DIR --data-dir DIR \\
        --run gpu:jax:compiled:1 --run gpu:jax:compiled:0.25 --run cpu:jax:compiled ...

Each --run is DEVICE:BACKEND:LOOP[:GPUS_PER_TRIAL[:nocache]] and is one whole gridbench search
(the same code path as `python -m gridbench search mnist`), recorded in DIR/mlflow.db.
CPU runs give each trial every usable core, one trial at a time. Prints, and writes
to DIR/packing.md and DIR/packing.json, per run: makespan, concurrency, and per
trial the steady-state epoch time, warm-up epoch, wall time and accuracy.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gridbench import environment  # noqa: E402
from gridbench.gridsearch import SearchOptions, plan_search, run_search  # noqa: E402
from gridbench.spec import load_spec  # noqa: E402


def parse_run(text: str) -> dict:
    parts = text.split(":")
    device, backend, loop = parts[:3]
    share = float(parts[3]) if len(parts) > 3 and parts[3] else None
    cache = not (len(parts) > 4 and parts[4] == "nocache")
    return {"device": device, "backend": backend, "loop": loop, "gpus_per_trial": share, "compile_cache": cache}


def spread(values: list[float], digits: int = 3) -> str:
    if not values:
        return "-"
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="mnist")
    parser.add_argument("--data-dir")
    parser.add_argument("--out", required=True)
    parser.add_argument("--run", action="append", required=True, type=parse_run)
    parser.add_argument("--set", action="append", default=[], help="KEY=VALUE for every run")
    args = parser.parse_args()

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{out.resolve() / 'mlflow.db'}"
    rows = []
    for run in args.run:
        sets = dict(item.split("=", 1) for item in args.set) | {"train_loop": run["loop"]}
        spec = load_spec(args.experiment).with_overrides(sets)
        options = SearchOptions(
            device=run["device"],
            backend=run["backend"],
            gpus_per_trial=run["gpus_per_trial"],
            gpus=1 if run["device"] == "gpu" else None,
            compile_cache=run["compile_cache"],
            tracking_uri=store,
            data_dir=args.data_dir,
            command_line=f"benchmarks/gpu_packing.py --run {':'.join(str(v) for v in run.values())}",
        )
        plan = plan_search(spec, options)
        started = time.perf_counter()
        result = run_search(plan)
        finished = [t for t in result.trials if t.finished]
        per_trial = [
            {
                "config": t.key,
                "device": t.tags.get("device.actual"),
                "steady_epoch_s": t.metrics["steady_epoch_s"],
                "warmup_epoch_s": t.metrics["warmup_epoch_s"],
                "trial_wall_s": t.metrics["trial_wall_s"],
                "test_accuracy": t.metrics["test_accuracy"],
                "gpu_util_pct_mean": t.metrics.get("gpu_util_pct_mean"),
                "gpu_process_mem_gib_peak": t.metrics.get("gpu_process_mem_gib_peak"),
            }
            for t in finished
        ]
        row = {
            **run,
            "cpus_per_trial": plan.cpus_per_trial,
            "trials_finished": result.summary.trials_finished,
            "trials_total": result.summary.trials_total,
            "concurrency": result.summary.concurrency,
            "makespan_s": result.summary.makespan_s,
            "command_s": time.perf_counter() - started,
            "overhead_ratio": result.summary.overhead_ratio,
            "parent_run_id": result.parent_run_id,
            "errors": [t.error for t in result.trials if not t.finished],
            "trials": per_trial,
        }
        rows.append(row)
        print(
            f"{run['device']} {run['backend']} {run['loop']} x{row['concurrency']} cache={run['compile_cache']}: "
            f"{row['trials_finished']}/{row['trials_total']} trials, makespan {row['makespan_s']:.1f} s, "
            f"steady {spread([t['steady_epoch_s'] for t in per_trial], 4)} s/epoch"
            + (f"; FAILED: {row['errors'][0]}" if row["errors"] else ""),
            flush=True,
        )

    header = (
        "| device | backend | loop | compile cache | trials at once | CPUs/trial "
        "| steady s/epoch per trial, median [min-max] "
        "| warm-up epoch s | trial wall s | test accuracy | GPU util % (mean) | makespan s | overhead ratio |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in rows:
        trials = row["trials"]
        accuracy = [t["test_accuracy"] for t in trials]
        util = [t["gpu_util_pct_mean"] for t in trials if t["gpu_util_pct_mean"] is not None]
        util_text = f"{statistics.fmean(util):.0f}" if util else "-"
        cache = "on" if row["compile_cache"] and row["backend"] == "jax" else "off"
        lines.append(
            f"| {row['device']} | {row['backend']} | {row['loop']} | {cache} | {row['concurrency']} "
            f"| {row['cpus_per_trial']} "
            f"| {spread([t['steady_epoch_s'] for t in trials], 4)} | {spread([t['warmup_epoch_s'] for t in trials], 2)} "
            f"| {spread([t['trial_wall_s'] for t in trials], 2)} "
            f"| {min(accuracy, default=0):.4f}-{max(accuracy, default=0):.4f} "
            f"| {util_text} | {row['makespan_s']:.1f} | {row['overhead_ratio']:.2f} |"
        )
    table = header + "\n".join(lines) + "\n"
    print("\n" + table)
    (out / "packing.md").write_text(table)
    (out / "packing.json").write_text(
        json.dumps({"environment": environment.collect(), "experiment": args.experiment, "runs": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
