"""What one program of the mnist grid costs to build, trace and compile, and what it then trains at.

Each case runs in a fresh Python process, as a search's worker would meet it, on the
first JAX device (KERAS_BACKEND=jax), with gridbench's own compiled loop
(gridbench.workloads.keras_compiled):
  - cold:        no persistent compilation cache
  - cache_fill:  a persistent cache directory, empty
  - cache_hit:   the same directory again, in a new process (a later search's worker)
Extra XLA flags can be tried with --xla-flags (e.g. "--xla_gpu_autotune_level=0"): the
steady epoch is reported beside each, so that a cheaper compilation is never bought with
a slower program unseen.

    python benchmarks/compile_cost.py --data PATH/mnist.npz [--hidden-units 512] [--batch-size 128]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    os.environ["KERAS_BACKEND"] = "jax"
    args = json.loads(sys.argv[1])
    t = time.perf_counter()
    import jax, keras, numpy as np
    from gridbench.datasets import DataSource
    from gridbench.datasets.trial_data import load
    from gridbench.workloads import keras_compiled as kc
    from gridbench.workloads.keras_mlp import build_mlp
    imports_s = time.perf_counter() - t
    if args["cache"]:
        jax.config.update("jax_compilation_cache_dir", args["cache"])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    data = load(DataSource("mnist", args["data"]), 0)
    hp = {"hidden_units": args["hidden_units"], "hidden_layers": 2, "dropout": 0.2, "optimizer": "rmsprop",
          "learning_rate": 1e-3, "batch_size": args["batch_size"], "epochs": 4}
    meta = {"n_features_in_": data.x_train.shape[1], "n_classes_": data.num_classes}
    session = kc.CompiledSession(hp, data, 0, lambda: build_mlp(hp["hidden_units"], 2, 0.2, meta), "mlp")
    t = time.perf_counter(); session.build(); jax.block_until_ready(session.state); build_s = time.perf_counter() - t
    model, optimizer = session.model, session.optimizer
    step = kc.make_train_step(model, optimizer, keras.losses.SparseCategoricalCrossentropy())
    epoch = jax.jit(kc.make_train_epoch(step, session.steps, session.batch_size), donate_argnums=0)
    t = time.perf_counter(); lowered = epoch.lower(*session._arguments()); trace_s = time.perf_counter() - t
    t = time.perf_counter(); compiled = lowered.compile(); compile_s = time.perf_counter() - t
    t = time.perf_counter()
    kc.compile_evaluation(kc.make_correct_count(model), session._arguments(), session.place)
    eval_compile_s = time.perf_counter() - t
    state, key = session.state, session.key
    epochs = []
    for _ in range(5):
        t = time.perf_counter()
        state, key, loss = compiled(state, key, session.x_train, session.y_train)
        jax.block_until_ready(loss)
        epochs.append(time.perf_counter() - t)
    print(json.dumps({"imports_s": imports_s, "build_s": build_s, "trace_s": trace_s, "compile_s": compile_s,
                      "eval_compile_s": eval_compile_s, "first_epoch_s": epochs[0],
                      "steady_epoch_s": sorted(epochs[1:])[len(epochs[1:]) // 2], "device": str(jax.devices()[0]),
                      "loss": float(loss)}))
    """
)


def run(case: str, settings: dict, xla_flags: str) -> dict:
    env = dict(os.environ)
    if xla_flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + xla_flags).strip()
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        sys.exit(f"compile_cost: {case} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="mnist.npz")
    parser.add_argument("--hidden-units", type=int, default=512)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--xla-flags", action="append", default=[""], help="also try with these XLA_FLAGS")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args()
    base = {"data": args.data, "hidden_units": args.hidden_units, "batch_size": args.batch_size}
    rows = []
    for flags in args.xla_flags:
        cache = tempfile.mkdtemp(prefix="gridbench-compile-cost-")
        for case, directory in (("cold", None), ("cache_fill", cache), ("cache_hit", cache)):
            row = {"case": case, "xla_flags": flags or "(default)", **run(case, {**base, "cache": directory}, flags)}
            rows.append(row)
            figures = "  ".join(f"{k} {v:.3f}" for k, v in row.items() if isinstance(v, float) and k != "loss")
            print(f"{row['xla_flags']:32s} {case:10s} {figures}  loss {row['loss']:.4f} on {row['device']}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
