"""How long a program found on disk takes to be ready: JAX's persistent cache alone (trace, lower, cache read)
against the executables gridbench saves beside it (gridbench.workloads.saved_programs), in one call.

    python benchmarks/program_ready.py [--data PATH/mnist.npz] [--repeats 3] [--json FILE]
    python benchmarks/program_ready.py --quick      # anywhere, in minutes: digits, a 64-unit MLP

Two programs of the mnist grid: one configuration on the compiled loop (an MLP trial's program) and a fused
group of 8 (benchmarks/fused.py's group size), each under two settings, each in a compile cache of its own:
  - jax-cache: GRIDBENCH_SAVED_PROGRAMS=0, the way before: JAX's persistent cache only;
  - saved:     the default: the executables saved beside it.
For each, a first process compiles the program into the empty cache ("fill"), then --repeats fresh processes
find it there ("ready"), as later searches' workers do. Each process does what a trial's compile phase does:
`session.compile()` after `session.build()`, on the first JAX device, and reports that phase's seconds (what the
trial records as compile_s), its parts by JAX's and gridbench's clocks (program.*_s), and the loss and accuracy
after 2 epochs, so that the two settings can be seen to train alike. Without --data the data are synthetic,
of mnist's shapes (the program is the same).

Each process handles Python's cyclic collector as a trial's worker does (gridbench.collector: paused over the imports,
then the start-up's heap collected and frozen), unless --plain-collector: a full collection in a plain process walks
the whole heap Keras and JAX imported: 0.119-0.132 s on 2 cores, against 0.0012-0.0043 s frozen
(docs/results/around-training/gen2-2core), and 0.105-0.164 s inside the window on an H100
(docs/results/around-training.md, "twenty-third").

To tell a slow window's cause, each process also reports, inside it: its CPU seconds (all threads), page faults and
context switches (getrusage), and Python's cyclic collections. With --data-first alternate, every second fresh
process first waits for its training data's transfer to the device and says how long that wait took: to compare a
gridbench/ whose build did not wait for it (before e00433e) with one that does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, sys, time
    os.environ["KERAS_BACKEND"] = "jax"
    args = json.loads(sys.argv[1])
    from gridbench import collector
    if not args.get("plain_collector"):  # as a trial's worker: no collection over the imports, then the heap frozen
        collector.pause_for_startup()
    import jax
    from gridbench import compile_cache
    from gridbench.datasets import DataSource
    from gridbench.datasets.trial_data import load
    from gridbench.trial.timing import PhaseClock
    from gridbench.workloads import WORKLOADS, keras_mlp
    collector.resume_after_startup()  # gridbench.trial.trial_runner does so once the framework is imported
    compile_cache.use(args["cache"])  # as keras_common.prepare does in a search's worker
    from jax.experimental import serialize_executable
    import threading
    loads, deserialize_and_load = {}, serialize_executable.deserialize_and_load
    def timed_load(*a, **k):  # each saved executable's load apart: the epoch's here, the evaluation's on a thread beside
        t = time.perf_counter()
        out = deserialize_and_load(*a, **k)
        loads["epoch" if threading.current_thread() is threading.main_thread() else "evaluation"] = time.perf_counter() - t
        return out
    serialize_executable.deserialize_and_load = timed_load
    import gc
    collections = []  # each cyclic collection: (generation, seconds), to tell a slow load from a collection inside it
    def collected(phase, info, started=[0.0]):
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            collections.append((info["generation"], time.perf_counter() - started[0]))
    gc.callbacks.append(collected)
    if args["quick"]:
        source = DataSource("digits")
    else:
        source = DataSource("mnist", args["data"]) if args["data"] else DataSource("mnist", synthetic=True)
    data = load(source, 0)
    hp = {hp.name: hp.default for hp in WORKLOADS["mlp"].hyperparameters}
    units, batch = (64, 32) if args["quick"] else (512, 128)
    hp.update(epochs=2, train_loop="compiled", hidden_units=units, batch_size=batch, optimizer="rmsprop")
    if args["program"] == "fused":
        members = [dict(hp, learning_rate=lr, dropout=d) for lr in (1e-3, 3e-4, 1e-4, 3e-5) for d in (0.2, 0.5)]
        session = keras_mlp.open_fused_session(members, data, [0] * len(members))
    else:
        session = keras_mlp.open_session(hp, data, seed=0)
    session.workload = "mlp"
    session.build()
    session.sync()
    data_wait_s = None
    if args.get("data_first"):  # the training data's transfer finished before the window, and how long it still took
        t = time.perf_counter()
        jax.block_until_ready([session.x_train, session.y_train])
        data_wait_s = time.perf_counter() - t
    before = compile_cache.phase_totals()
    collections.clear()
    import resource
    usage = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    tags = session.compile()
    ready_s = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    # The process's CPU seconds (every thread), page faults and context switches inside the ready window: a slow
    # window with as much CPU as a fast one waited (a lock, the driver, the scheduler); with more, it worked more.
    window = {name: getattr(after, "ru_" + name) - getattr(usage, "ru_" + name)
              for name in ("utime", "stime", "minflt", "majflt", "nvcsw", "nivcsw")}
    gc_in_ready = list(collections)
    phases = compile_cache.phases_since(before)
    fit = session.fit(PhaseClock(sync=session.sync))
    evaluation = session.evaluate()
    fit, evaluation = (fit[0], evaluation[0]) if isinstance(fit, list) else (fit, evaluation)
    print(json.dumps({"ready_s": ready_s, "cached": tags["program.cached"], **phases, "loads_s": [loads[p] for p in ("epoch", "evaluation") if p in loads],
                      "gc_s": sum(s for _, s in gc_in_ready), "window": window, "data_wait_s": data_wait_s, "gc_generations": [g for g, _ in gc_in_ready],
                      "loss": fit["train_loss"], "accuracy": evaluation["test_accuracy"],
                      "device": str(jax.devices()[0]), "device_kind": jax.devices()[0].device_kind}))
    """
)
PARTS = ("trace_s", "lower_s", "backend_s", "cache_read_s", "executable_read_s", "executable_write_s")


def run(settings: dict, saved: bool) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    env.pop("GRIDBENCH_SAVED_PROGRAMS", None)
    if not saved:
        env["GRIDBENCH_SAVED_PROGRAMS"] = "0"
    done = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(settings)], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        sys.exit(f"program_ready: {settings} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def show(program: str, setting: str, stage: str, row: dict) -> None:
    parts = "  ".join(f"{p.removesuffix('_s')} {row[p]:.3f}" for p in PARTS if row[p])
    if row.get("loads_s"):  # the epoch's, then the evaluation's (loaded at once since 2026-12-07)
        parts += "  (epoch " + ", evaluation ".join(f"{s:.3f}" for s in row["loads_s"]) + ")"
    if row.get("window"):
        w = row["window"]
        parts += (
            f"  cpu {w['utime'] + w['stime']:.3f} s, faults {w['minflt']}+{w['majflt']} major, "
            f"switches {w['nvcsw']}+{w['nivcsw']} forced"
        )
    if row.get("data_wait_s") is not None:
        parts += f"  data first, waited {row['data_wait_s']:.4f} s"
    if row.get("gc_generations"):  # Python's cyclic collections inside the ready window, and their seconds
        parts += f"  gc {row['gc_s']:.3f} s (generations {','.join(map(str, row['gc_generations']))})"
    print(
        f"{program:5s} {setting:9s} {stage:5s} ready {row['ready_s']:.3f} s (cached {row['cached']}: {parts})  "
        f"loss {row['loss']:.5f} accuracy {row['accuracy']:.4f} on {row['device_kind']}",
        flush=True,
    )


def chosen(parser: argparse.ArgumentParser, option: str, value: str, names: tuple[str, ...]) -> list[str]:
    """The comma-separated `value` of `option` as `names` in their own order; an error unless it names only them."""
    asked = value.split(",")
    if set(asked) - set(names):
        parser.error(f"{option} {value}: name {', '.join(names[:-1])}, {names[-1]} or all, comma-separated")
    return [name for name in names if name in asked]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", help="mnist.npz (default: synthetic data of its shapes)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes that find the program (default 3)")
    parser.add_argument("--quick", action="store_true", help="digits and a 64-unit MLP, for a CPU")
    parser.add_argument("--json", help="write every row here")
    parser.add_argument(
        "--settings", default="jax-cache,saved", help="which settings, comma-separated (default jax-cache,saved)"
    )
    parser.add_argument(
        "--data-first",
        choices=("no", "alternate"),
        default="no",
        help="alternate: every second fresh process waits for its training data's transfer before the ready window",
    )
    parser.add_argument(
        "--plain-collector",
        action="store_true",
        help="leave Python's collector as a plain process has it (until 2026-12-07 the child's way), not as a "
        "trial's worker has it (paused over the imports, then the heap frozen: gridbench.collector)",
    )
    parser.add_argument("--programs", default="mlp,fused", help="which programs, comma-separated (default mlp,fused)")
    args = parser.parse_args()
    programs = chosen(parser, "--programs", args.programs, ("mlp", "fused"))
    rows, settings_run = [], chosen(parser, "--settings", args.settings, ("jax-cache", "saved"))
    for program in programs:
        for setting in settings_run:
            cache = tempfile.mkdtemp(prefix=f"gridbench-ready-{program}-{setting}-")
            settings = {"data": args.data, "program": program, "cache": cache, "quick": args.quick}
            settings.update(plain_collector=args.plain_collector)
            for index, stage in enumerate(("fill", *["ready"] * args.repeats)):
                settings["data_first"] = args.data_first == "alternate" and index % 2 == 0 and stage == "ready"
                row = {"program": program, "setting": setting, "stage": stage, **run(settings, setting == "saved")}
                rows.append(row)
                show(program, setting, stage, row)
    print("\nready_s when found in the cache: median [min-max] over the fresh processes")
    for program in programs:
        for setting in settings_run:
            ready = [
                r["ready_s"] for r in rows if (r["program"], r["setting"], r["stage"]) == (program, setting, "ready")
            ]
            print(f"  {program:5s} {setting:9s} {statistics.median(ready):.3f} [{min(ready):.3f}-{max(ready):.3f}] s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
