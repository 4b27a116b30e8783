"""The `mnist` grid at several trials per GPU, and on the machine's CPU cores, in one run.

    python benchmarks/gpu_packing.py --out DIR --data-dir DIR \\
        --run gpu:jax:compiled:1 --run gpu:jax:compiled:0.25 --run cpu:jax:compiled ...

Each --run is DEVICE:BACKEND:LOOP[:GPUS_PER_TRIAL[:nocache]] and is one whole gridbench search
(the same code path as `python -m gridbench search mnist`), recorded in DIR/mlflow.db.
CPU runs give each trial every usable core, one trial at a time. Prints, and writes
to DIR/packing.md and DIR/packing.json, per run: makespan, concurrency, and per
trial the steady-state epoch time, warm-up epoch, wall time and accuracy. The table is
benchmarks/packing_table.py's, which rebuilds it from packing.json files kept earlier.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import packing_table  # noqa: E402  (benchmarks/, the script's folder)

from gridbench import environment  # noqa: E402
from gridbench.gridsearch import SearchOptions, plan_search, run_search  # noqa: E402
from gridbench.spec import load_spec  # noqa: E402


def parse_run(text: str) -> dict:
    parts = text.split(":")
    device, backend, loop = parts[:3]
    share = float(parts[3]) if len(parts) > 3 and parts[3] else None
    cache = not (len(parts) > 4 and parts[4] == "nocache")
    return {"device": device, "backend": backend, "loop": loop, "gpus_per_trial": share, "compile_cache": cache}


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
            f"steady {packing_table.spread([t['steady_epoch_s'] for t in per_trial], 4)} s/epoch"
            + (f"; FAILED: {row['errors'][0]}" if row["errors"] else ""),
            flush=True,
        )

    table = packing_table.table(rows)
    print("\n" + table)
    (out / "packing.md").write_text(table)
    (out / "packing.json").write_text(
        json.dumps({"environment": environment.collect(), "experiment": args.experiment, "runs": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
