"""Compiling a search's programs before its trials need them, in processes of their own.

    python -m gridbench.trial.precompile JOB RESULTS

The driver (gridbench.gridsearch.precompile) starts a few of these while Ray starts. Each
one configures itself as a trial of the search would (backend, threads, the device),
imports the framework, and compiles its share of the search's programs (JOB: the
TrialContext and the programs' indices, pickled) into the search's compile cache,
each under the same per-program lock the trials take (gridbench.workloads.programs).
A trial that needs a program then loads it from the cache (program.cached), or waits
for the compilation under way and loads it after.

They are separate processes, not threads in a worker, because compiling in threads
beside a trial in its own process starved it: 30 s for its own program, against about
4 s alone (docs/results/h100-issue15.md).
Each compiled program is one JSON line in RESULTS, which the driver reads back for the
search's record; nothing is written to the store from here. Each line, and one more written first
("prepared": the imports, the data and the compile cache ready), carries its wall-clock time (`at`, seconds
since the epoch), so that a kept search directory (--keep-ray-logs) shows when each process could begin to
compile and when each program was ready (benchmarks/precompile_timeline.py).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import pickle
import sys
import time
import traceback
from importlib import metadata

from gridbench.trial import keras_import
from gridbench.trial.context import TrialContext, configure_process
from gridbench.trial.steps import load_data
from gridbench.workloads import program_key, source_digest

NICENESS = 10  # these processes yield the cores to what they run beside: Ray's start, Tune, the trials

# Beside JAX's persistent cache: one file per program these processes found or put there, named by what the
# program depends on. A search whose programs all have one starts no compiling processes: they would only
# load what its trials load anyway (on an H200, 6.6-10 s of processes and 1.6-4.3 s of waiting for them).
READY_DIR = "gridbench-ready"
_VERSIONED = ("gridbench", "jax", "jaxlib", "keras")


@functools.cache  # once per process: every program's name holds them
def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for package in _VERSIONED:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    return found


def ready_name(context: TrialContext, index: int) -> str | None:
    """The ready file's name for the search's program `index`; None: no name fits (a user's own model)."""
    if context.user_workload is not None or context.compile_cache_dir is None:
        return None
    if context.fused_groups:  # a group's program holds its members and their epochs
        program: object = {"params": dict(context.params), "group": context.fused_groups[index]}
    else:  # what a trial's executables depend on (gridbench.workloads.program_key): not its epochs, learning rate or
        # dropout, which a 300-epoch scale after a 10-epoch fill would otherwise find not ready (6.9 s on an H100 x4)
        program = program_key({**context.params, **context.programs[index]})
    what = {
        "workload": context.workload,
        "program": program,
        "data": repr(context.data),
        "device": context.device,
        "backend": context.backend,
        "seed": context.seed,
        # The devices a trial's program spans (data parallel): not a fraction of one GPU, which changes its memory
        # limit, not its executables.
        "devices": math.ceil(context.gpus_per_trial),
        "versions": _versions(),
        "workloads": source_digest(),  # an edited gridbench.workloads traces other programs
    }
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=repr).encode()).hexdigest()[:32]


def all_ready(context: TrialContext, programs: int) -> bool:
    """True where every one of the search's `programs` was found or compiled into its cache before."""
    names = [ready_name(context, i) for i in range(programs)]
    folder = os.path.join(context.compile_cache_dir or "", READY_DIR)
    return programs > 0 and all(n is not None and os.path.exists(os.path.join(folder, n)) for n in names)


def mark_ready(context: TrialContext, index: int) -> None:
    """Notes that the search's program `index` is in its cache (where a name fits it)."""
    name = ready_name(context, index)
    if name is None:
        return
    folder = os.path.join(context.compile_cache_dir, READY_DIR)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as ready:
        ready.write(f"{time.time():.0f}\n")


def program_session(entry, context: TrialContext, index: int, data):
    """The session of the search's program `index` (context.programs, or its fused groups); None: not compilable."""
    if context.fused_groups:
        from gridbench.trial.fused import open_group

        session = open_group(entry, context, context.params, context.fused_groups[index], data)
    else:
        session = entry.open_session({**context.params, **context.programs[index]}, data, seed=context.seed)
    return session if hasattr(session, "compile_detached") else None  # Keras fit: its first trial compiles it


def compile_programs(context: TrialContext, indices: list[int], results, started: float) -> None:
    """Compiles the programs at `indices`; writes one JSON line per program to `results` as each is ready,
    after one saying when this process was prepared to compile (`started`: its main's wall-clock start)."""
    from gridbench.workloads.programs import PROGRAMS

    workload = context.resolve_workload()
    keras_import.import_for(workload)
    entry = workload.load_train()
    entry.prepare(context)  # the search's compile cache and its per-program locks
    imported = time.time()
    data = load_data(context, context.params)
    prepared_at = time.time()
    prepared = {
        "prepared": True,
        "started_at": started,
        "imports_s": imported - started,
        "data_s": prepared_at - imported,
    }
    results.write(json.dumps({**prepared, "at": prepared_at}) + "\n")
    results.flush()
    missing = device_missing(context)
    if missing is not None:  # nothing compiled, nothing marked ready: each program's line says why
        results.writelines(json.dumps({"index": i, "error": missing, "at": time.time()}) + "\n" for i in indices)
        return
    sessions, ready = [], []
    for index in indices:
        began = time.perf_counter()
        line: dict = {"index": index}
        try:
            session = program_session(entry, context, index, data)
            if session is None:
                continue
            lookup = PROGRAMS.get(session.program_key, session.compile_detached)
            sessions.append(session)
            # cached: a trial (or an earlier search, on a persistent cache) compiled it first; this one loaded it.
            line.update(compile_s=lookup.program.compile_s, cached=lookup.program.cached)
            ready.append(index)
        except Exception as err:  # noqa: BLE001 - the trial that needs it compiles it, and says why if it fails too
            line["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:300]
            traceback.print_exc()
        line.update(wall_s=time.perf_counter() - began, at=time.time())
        results.write(json.dumps(line) + "\n")
        results.flush()
    if save_unsaved(sessions):
        for index in ready:
            mark_ready(context, index)


def device_missing(context: TrialContext) -> str | None:
    """Why this process cannot compile a GPU search's programs, or None. JAX without a GPU compiles for the CPU,
    into a cache whose ready files would name the GPU: possible where the driver started compiling on the backend
    it assumed before asking (gridbench.gridsearch.plan), and the answer was no."""
    if context.device != "gpu" or context.backend != "jax":
        return None
    import jax

    platform = jax.default_backend()
    return None if platform == "gpu" else f"JAX's backend here is {platform}, not a GPU"


def save_unsaved(sessions: list) -> bool:
    """Compiles again, past JAX's cache, each program that cache served with no saved file to read, and saves it
    (gridbench.workloads.saved_programs): later workers then load it without tracing. After every program of
    this process is ready and outside the per-program locks, so that no trial waits for it; within this
    process's wall time (the search records it). False where they could not be saved."""
    from gridbench.workloads import saved_programs

    unsaved = [session for session in sessions if session.program_key in saved_programs.SERVED_UNSAVED]
    if not unsaved:
        return True
    try:
        with saved_programs.past_jax_cache():
            for session in unsaved:
                session.compile_detached()
    except Exception:  # noqa: BLE001 - JAX's cache served these programs; saving them is only for next time
        traceback.print_exc()
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    started = time.time()
    os.nice(NICENESS)
    job_path, results_path = argv if argv is not None else sys.argv[1:]
    with open(job_path, "rb") as job:
        context, indices = pickle.load(job)
    configure_process(context)
    if context.device == "gpu" and context.backend == "jax":
        # A compiler beside the trials, not a trial: it takes only the memory compiling needs.
        os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
        os.environ.pop("XLA_PYTHON_CLIENT_MEM_FRACTION", None)
    with open(results_path, "a", encoding="utf-8") as results:
        compile_programs(context, indices, results, started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
