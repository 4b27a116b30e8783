"""What a worker's first trial pays that its later trials do not, part by part, in fresh processes (issue
"Everything around the training": the headline's first trial).

    python benchmarks/first_trial.py --data PATH/mnist.npz [--repeats 3] [--variants worker,no-cublas] [--json FILE]

On an H100 the cached headline's first trial spent 0.372-0.504 s in its setup and 0.163-0.202 s in its evaluation,
against 0.042-0.052 s and 0.021-0.024 s for the later trials' medians (docs/results/around-training.md,
"twenty-third"). Each fresh process here does what a search's worker does (gridbench.trial.trial_runner): the device
started on a thread beside the imports, the collector paused over them, JAX's persistent cache in use (the search's:
run the headline first, so that its programs are there), then three of the headline's trials one after another
(batch_size/hidden_units 128/256, 256/256, 128/512). Per trial it times the build's parts (the seed, the model and its
optimizer, the state's and the data's copies and the wait for them), the program's load, the epochs, and the
evaluation twice over (the second run of the same executable tells a first run's own cost from a library's start), with
what JAX compiled or read from its cache inside each part, and Python's cyclic collections.

--variants: `worker` starts the device as a worker does (gridbench.trial.steps.start_jax_backend_early: the device,
then cuBLAS by one small product, beside the imports); `no-cublas` the device alone, as workers did before 2026-12-07.
Each is run in --repeats fresh processes, in turn, with a worker's environment (gridbench.trial.context's
process_environment: JAX grows to its memory cap instead of preallocating). c5c710f's version of this script ran
without it, so that its first model build held JAX's preallocation (1.1 s on an H100), and its `blas` variant
compiled the product before JAX was pointed at the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap

from program_ready import chosen  # beside this script: python benchmarks/first_trial.py

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    args = json.loads(sys.argv[1])
    from gridbench.trial.context import TrialContext, process_environment
    # The worker's environment: its backend, threads and GPU memory (JAX grows to its cap instead of preallocating).
    os.environ.update(process_environment("jax", args["device"], os.cpu_count(), 1.0))
    started = time.perf_counter()
    from gridbench import collector
    collector.pause_for_startup()
    from gridbench.datasets import DataSource
    from gridbench.trial import steps
    # cuBLAS' start beside the imports (a worker since 2026-12-07), or the device's start alone (before)
    cache = args["cache"] if args["variant"] == "worker" else None
    context = TrialContext("mnist", {}, DataSource("mnist"), args["device"], "jax", cpus=os.cpu_count(), seed=0,
                           compile_cache_dir=cache)
    steps.start_jax_backend_early(context)
    import jax, keras
    from gridbench import compile_cache
    from gridbench.datasets.trial_data import load
    from gridbench.trial.timing import PhaseClock
    from gridbench.workloads import WORKLOADS, keras_compiled, keras_mlp
    import_s = time.perf_counter() - started
    collector.resume_after_startup()
    compile_cache.use(args["cache"])  # as the trial's setup does (keras_common.prepare), before it waits for the device
    compile_cache.listen()
    device = dict(zip(("start_s", "wait_s"), steps.backend_started().values()))
    import gc
    collections = []
    def collected(phase, info, began=[0.0]):
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collections.append(time.perf_counter() - began[0])
    gc.callbacks.append(collected)
    data = load(DataSource("mnist", args["data"]), 0)

    def measured(parts, name, call, *a, **k):  # seconds, compilations asked/served by the cache, JAX's clocks
        before, mark, gcs = compile_cache.phase_totals(), compile_cache.mark(), len(collections)
        t = time.perf_counter()
        out = call(*a, **k)
        seconds = time.perf_counter() - t
        asked, served = (now - then for now, then in zip(compile_cache.mark(), mark))
        phases = {k: round(v, 4) for k, v in compile_cache.phases_since(before).items() if v}
        parts[name] = {"s": seconds, "compiles": asked, "cached": served, **phases, "gc_s": sum(collections[gcs:])}
        return out

    build_parts = {}
    def timing(name, function):
        def timed(*a, **k):
            return measured(build_parts, name, function, *a, **k)
        return timed
    keras_compiled.set_random_seed = timing("seed", keras_compiled.set_random_seed)
    keras_compiled.model_and_optimizer = timing("model", keras_compiled.model_and_optimizer)
    keras_compiled.state_of = timing("state", keras_compiled.state_of)
    keras_compiled.wait_until_placed = timing("wait", keras_compiled.wait_until_placed)
    defaults = {hp.name: hp.default for hp in WORKLOADS["mlp"].hyperparameters}
    trials = []
    for batch, units in ((128, 256), (256, 256), (128, 512)):
        hp = dict(defaults, epochs=4, hidden_layers=2, dropout=0.2, optimizer="rmsprop", learning_rate=0.001,
                  train_loop="compiled")
        hp.update(batch_size=batch, hidden_units=units)
        parts, build_parts = {}, {}
        session = keras_mlp.open_session(hp, data, seed=0)
        session.workload = "mlp"
        measured(parts, "build", session.build)
        parts.update({"build." + k: v for k, v in build_parts.items()})
        measured(parts, "program", session.compile)
        clock = PhaseClock(sync=session.sync)
        measured(parts, "fit", session.fit, clock)
        first = measured(parts, "eval", session.evaluate)
        again = measured(parts, "eval.again", session.evaluate)
        assert first == again, (first, again)
        trials.append({"batch_size": batch, "hidden_units": units, "parts": parts, "epochs_s": clock.epochs,
                       "accuracy": first["test_accuracy"]})
    print(json.dumps({"import_s": import_s, **{"device." + k: v for k, v in device.items()}, "trials": trials,
                      "device": jax.devices()[0].device_kind}))
    """
)
VARIANTS = ("worker", "no-cublas")
SHOWN = ("build", "build.seed", "build.model", "build.state", "build.wait", "program", "fit", "eval", "eval.again")


def run(settings: dict) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        sys.exit(f"first_trial: {settings['variant']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def show(variant: str, row: dict) -> None:
    ahead = "  ".join(f"{k} {v:.3f}" for k, v in row.items() if k.startswith("device.") or k == "import_s")
    print(f"{variant}: {ahead} s on {row['device']}")
    for trial in row["trials"]:
        parts = trial["parts"]
        cells = []
        for name in SHOWN:
            part = parts.get(name)
            if part:
                extra = f" [{part['compiles']} compiled, {part['cached']} from cache]" if part["compiles"] else ""
                extra += f" [gc {part['gc_s']:.3f}]" if part["gc_s"] else ""
                cells.append(f"{name} {part['s']:.4f}{extra}")
        print(f"  {trial['batch_size']}/{trial['hidden_units']}: " + ", ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="mnist.npz")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant (default 3)")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated (default: all of them)")
    parser.add_argument("--device", default="gpu", choices=("gpu", "cpu"), help="where (default gpu)")
    parser.add_argument("--cache", help="JAX's cache to use (default: gridbench's persistent one, as a search's)")
    parser.add_argument("--json", help="write every row here")
    args = parser.parse_args()
    variants = chosen(parser, "--variants", args.variants, VARIANTS)
    from gridbench import compile_cache  # imports no JAX

    cache = args.cache or compile_cache.persistent_dir()
    rows = []
    for _ in range(args.repeats):
        for variant in variants:
            row = {
                "variant": variant,
                **run({"data": args.data, "cache": cache, "variant": variant, "device": args.device}),
            }
            rows.append(row)
            show(variant, row)
    print("\nmedians [min-max] over the fresh processes, s: the first trial's, then the later two's")
    for variant in variants:
        mine = [r for r in rows if r["variant"] == variant]
        imports = [r["import_s"] for r in mine]  # beside the device's thread: what that thread costs the imports
        print(
            f"  {variant:8s} {'imports':11s} {statistics.median(imports):.4f} [{min(imports):.4f}-{max(imports):.4f}]"
        )
        for name in SHOWN:
            first = [r["trials"][0]["parts"][name]["s"] for r in mine if name in r["trials"][0]["parts"]]
            later = [t["parts"][name]["s"] for r in mine for t in r["trials"][1:] if name in t["parts"]]
            if first:
                print(
                    f"  {variant:8s} {name:11s} first {statistics.median(first):.4f} [{min(first):.4f}-"
                    f"{max(first):.4f}]  later {statistics.median(later):.4f} [{min(later):.4f}-{max(later):.4f}]"
                )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
