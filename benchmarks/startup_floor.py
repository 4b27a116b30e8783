"""What a search's start-up costs before gridbench does anything of its own, on this machine.

Each step runs in a fresh Python process, the way a search meets it:
  - ray_init:   a bare local `ray.init` with a search's options (no dashboard, 127.0.0.1)
  - tune_trial: after that, from `Tuner.fit` to a trivial trial's first line, and to fit's return
  - imports:    inside that trial, `import jax`, `import keras` (JAX backend), and the first device query

These are the floor under gridbench's own `startup_s` and time to first trial; the
search's figures are compared against them in docs/results/.

    python benchmarks/startup_floor.py [--repeats 3] [--gpus 1] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    t0 = time.perf_counter()
    import ray
    from ray import tune
    imported = time.perf_counter() - t0
    cpus, gpus = int(sys.argv[1]), int(sys.argv[2])
    start = time.perf_counter()
    ray.init(address="local", num_cpus=cpus, num_gpus=gpus, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR", _node_ip_address="127.0.0.1")
    ray_init = time.perf_counter() - start

    def trial(config):
        began = time.time()
        t = time.perf_counter()
        import jax
        jax_s = time.perf_counter() - t
        t = time.perf_counter()
        os.environ["KERAS_BACKEND"] = "jax"
        import keras  # noqa: F401
        keras_s = time.perf_counter() - t
        t = time.perf_counter()
        devices = [str(d) for d in jax.devices()]
        devices_s = time.perf_counter() - t
        tune.report({"began": began, "jax_s": jax_s, "keras_s": keras_s, "devices_s": devices_s,
                     "devices": ",".join(devices)})

    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    trainable = tune.with_resources(trial, {"cpu": cpus, "gpu": gpus})
    fit_start_wall, fit_start = time.time(), time.perf_counter()
    result = tune.Tuner(trainable, tune_config=tune.TuneConfig(num_samples=1),
                        run_config=tune.RunConfig(verbose=0, storage_path="/tmp/startup-floor")).fit()
    fit_s = time.perf_counter() - fit_start
    row = result[0].metrics
    start_shutdown = time.perf_counter()
    ray.shutdown()
    print(json.dumps({
        "import_ray_tune_s": imported, "ray_init_s": ray_init, "fit_to_trial_start_s": row["began"] - fit_start_wall,
        "fit_s": fit_s, "import_jax_s": row["jax_s"], "import_keras_s": row["keras_s"],
        "first_device_query_s": row["devices_s"], "devices": row["devices"],
        "ray_shutdown_s": time.perf_counter() - start_shutdown,
    }))
    """
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpus", type=int, default=os.cpu_count())
    parser.add_argument("--gpus", type=int, default=0)
    parser.add_argument("--json", help="write every repeat's figures here")
    args = parser.parse_args()
    rows = []
    for _ in range(args.repeats):
        done = subprocess.run(
            [sys.executable, "-c", CHILD, str(args.cpus), str(args.gpus)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            sys.exit(f"startup_floor: the child failed:\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for key in rows[0]:
        values = [row[key] for row in rows]
        if isinstance(values[0], float):
            spread = f" (min {min(values):.2f}, max {max(values):.2f})" if len(values) > 1 else ""
            print(f"{key:24s} median {statistics.median(values):6.2f} s{spread}")
        else:
            print(f"{key:24s} {values[0]}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
