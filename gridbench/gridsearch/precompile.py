"""The driver's side of compiling a search's programs ahead (gridbench.trial.precompile).

A search on JAX's compiled loop (or fused) needs one XLA compilation per program, 3-6 s
each on an H100 (docs/results/h100-issue15.md). Its trials would pay them one after
another, on the first trial of each program. Instead, while Ray starts (which takes
seconds the trials cannot use), a few processes compile the search's programs into its
compile cache, a share each; a trial then loads its program from the cache, or waits
for the compilation under way.

What this costs is recorded, not hidden: the parent run gets the programs compiled, the
processes, their wall time and XLA's seconds in them; every trial still records what
getting its program cost it (compile_s, program.cached). On a CPU the trials do not
start until the compilations have ended, so that none shares the cores of a timed
epoch; that wait is recorded too (precompile_wait_s) and counts in the makespan, as the
compilations that trials train beside do on a GPU: only what Ray's start hid is gone.

A search whose programs an earlier one left ready in the persistent cache (gridbench.trial.precompile's
ready files) starts no processes: they would load from the cache what the trials load anyway. The
record says so (programs_precompile_loaded, no processes).
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from gridbench import compile_cache

if TYPE_CHECKING:
    from gridbench.gridsearch.plan import SearchPlan
    from gridbench.trial import TrialContext

# XLA's GPU compiler runs on many threads: on an H100's 16 cores, four processes compiling at once took
# 55-64 s of XLA time for four programs that take 4.5-6 s each alone, and Tune took up to 14 s instead of
# 3-5 s to start the first trial (docs/results/h100-issue15.md). Fewer processes, each below the trials' priority
# (gridbench.trial.precompile.NICENESS). A CPU search keeps one per 8 cores.
CORES_PER_PROCESS = 8
# On a GPU that finding no longer held with 2026-12-06's code: with 4 processes each program waited behind none in
# its own process, and on one H100 of 16 cores the headline's first run on an empty cache took 18.05 and 20.60 s,
# against 20.85 and 21.53 s with 2, alternating; its first trial waited longer for its program, 7.29 and 8.55 s
# against 5.07 and 4.83 s (docs/results/around-training.md, "sixteenth").
GPU_CORES_PER_PROCESS = 4
MAX_PROCESSES = 8

# --compile-ahead auto: on a GPU, and on a CPU of CORES_PER_PROCESS cores or more. On the developer
# machine's 2 cores a CPU search's one process shared the cores with Ray's start, and its trials,
# which wait for every compilation, started 4 s later with no shorter makespan
# (docs/results/h100-issue15/precompile/cpu-2core).


@dataclass(frozen=True)
class PrecompileReport:
    """What compiling ahead did, as the parent run records it."""

    processes: int = 0
    programs: int = 0  # compiled by these processes
    loaded: int = 0  # found in the cache already (a trial, or an earlier search, compiled them)
    failed: int = 0  # left to the trials that need them
    wall_s: float = 0.0  # from the processes' start to the last one's end
    ended_at: float = 0.0  # when the last one ended, as wall_s counts it (Unix time)
    compile_sum_s: float = 0.0  # the compilations' own seconds, added up
    wait_s: float = 0.0  # what the trials' start waited for them (CPU searches; in the makespan)
    failures: tuple[str, ...] = ()  # one line per program that failed: which, and why


def program_count(plan: SearchPlan, programs: int) -> int:
    """Programs worth compiling ahead for `plan` (0: none), given `programs` distinct programs in its grid."""
    spec, options = plan.spec, plan.options
    if options.compile_ahead == compile_cache.AHEAD_OFF or (
        options.compile_ahead == compile_cache.AHEAD_AUTO and options.device == "cpu" and plan.cpus < CORES_PER_PROCESS
    ):
        return 0
    if options.address or plan.backend != "jax" or spec.workload.framework != "keras":
        return 0  # a cluster's nodes compile into caches of their own; other backends have no compiled loop
    if options.compile_cache == compile_cache.OFF or plan.data_parallel:
        return 0
    if plan.fused_groups:
        return len(plan.fused_groups)
    loops = {spec.params.get("train_loop"), *spec.grid.get("train_loop", ())}
    return programs if "compiled" in loops else 0


def process_count(programs: int, cores: int, device: str) -> int:
    per_process = GPU_CORES_PER_PROCESS if device == "gpu" else CORES_PER_PROCESS
    return min(programs, max(1, cores // per_process), MAX_PROCESSES)


class Precompiler:
    """The processes compiling one search's programs; started once, waited for or stopped by the search."""

    def __init__(
        self,
        processes: list[subprocess.Popen],
        results: list[str],
        started: float,
        names: list[str] | None = None,
        logs: list[str] | None = None,
    ):
        self._processes = processes
        self._results = results
        self._started = started
        self._names = names or []  # the programs as a user knows them (program_names), by index
        self._logs = logs or []
        self._ended = [None] * len(processes)
        self.wait_s = 0.0
        for i, process in enumerate(processes):
            threading.Thread(target=self._watch, args=(i, process), name="gridbench-precompile", daemon=True).start()

    @classmethod
    def start(cls, plan: SearchPlan, context: TrialContext, programs: int, directory: str) -> Precompiler:
        """Starts the processes, each with every n-th program in the grid's order, so the first trials' come first."""
        count = process_count(programs, plan.cpus, plan.options.device)
        os.makedirs(directory, exist_ok=True)
        env = _environment(plan)
        context = replace(context, cpus=max(1, plan.cpus // count))  # the threads each process compiles with
        processes, results, logs = [], [], []
        names = program_names(context, programs)
        started = time.perf_counter()
        for i in range(count):
            job, result = os.path.join(directory, f"job-{i}.pickle"), os.path.join(directory, f"programs-{i}.jsonl")
            with open(job, "wb") as out:
                pickle.dump((context, list(range(i, programs, count))), out)
            with open(result, "w", encoding="utf-8") as out:  # when, for a timeline (the process appends)
                out.write(json.dumps({"launched_at": time.time()}) + "\n")
            logs.append(os.path.join(directory, f"log-{i}.txt"))
            with open(logs[-1], "w") as log:
                processes.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "gridbench.trial.precompile", job, result],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                    )
                )
            results.append(result)
        return cls(processes, results, started, names, logs)

    @property
    def pids(self) -> list[int]:
        return [process.pid for process in self._processes]

    def _watch(self, index: int, process: subprocess.Popen) -> None:
        process.wait()
        self._ended[index] = time.perf_counter()

    def wait(self) -> None:
        """Waits until every process has ended, adding the seconds to wait_s."""
        start = time.perf_counter()
        for process in self._processes:
            process.wait()
        self.wait_s += time.perf_counter() - start

    def stop(self, grace_s: float = 3.0) -> None:
        """Ends, by PID, the processes still compiling (the search ended or failed before they did)."""
        for process in self._processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + grace_s
        for process in self._processes:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def report(self) -> PrecompileReport:
        """What the processes have done so far (every program, once they have ended)."""
        lines, failures = [], []
        for i, path in enumerate(self._results):
            try:
                with open(path, encoding="utf-8") as results:
                    own = [json.loads(line) for line in results if line.strip()]
                own = [line for line in own if "index" in line]  # a program's, not "launched_at" or "prepared"
            except (OSError, ValueError):
                own = []
            lines += own
            failures += self._failures(i, own)
        ended = [t for t in self._ended if t is not None]
        last = max(ended) if ended else time.perf_counter()
        compiled = [line for line in lines if "error" not in line and not line.get("cached")]
        return PrecompileReport(
            processes=len(self._processes),
            programs=len(compiled),
            loaded=sum(1 for line in lines if line.get("cached") and "error" not in line),
            failed=len(failures),
            wall_s=last - self._started,
            ended_at=time.time() - (time.perf_counter() - last),  # on the trials' clock (their started_at)
            compile_sum_s=sum(line["compile_s"] for line in compiled),
            wait_s=self.wait_s,
            failures=tuple(failures),
        )

    def _failures(self, process: int, lines: list[dict]) -> list[str]:
        """One line per program of this process that failed: its own error, or the process's end before it."""
        count = len(self._processes)
        share = range(process, len(self._names), count)  # as start() handed them out
        failed = [f"program {self._name(line.get('index'))}: {line['error']}" for line in lines if "error" in line]
        code = self._processes[process].poll()
        done = {line.get("index") for line in lines}
        if code not in (None, 0):  # it died before compiling these
            why = f"its compiling process exited with code {code}" + _last_line(self._logs, process)
            failed += [f"program {self._name(index)}: {why}" for index in share if index not in done]
        return failed

    def _name(self, index) -> str:
        return self._names[index] if isinstance(index, int) and 0 <= index < len(self._names) else f"#{index}"


def program_names(context: TrialContext, programs: int) -> list[str]:
    """The search's programs in compiling order, as a user knows them: a configuration, or a fused group."""
    from gridbench.tracking.records import config_key

    if context.fused_groups:
        return [f"of fused group {i + 1} ({len(group)} configurations)" for i, group in enumerate(context.fused_groups)]
    return [config_key(context.programs[i]) if i < len(context.programs) else f"#{i}" for i in range(programs)]


def _last_line(logs: list[str], process: int) -> str:
    """'; its log ends: ...' from the process's log, if it said anything."""
    try:
        with open(logs[process], encoding="utf-8", errors="replace") as log:
            said = [line.strip() for line in log.read()[-4000:].splitlines() if line.strip()]
    except (OSError, IndexError):
        return ""
    return f"; its log ends: {said[-1][:200]}" if said else ""


def _environment(plan: SearchPlan) -> dict[str, str]:
    """The processes' environment: the driver's, with its import path (a user's modules) and one GPU.

    On a GPU they compile on the first GPU Ray hands out; programs are cached per device
    kind, so a trial on any other GPU of that kind loads them too.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    if plan.options.device == "gpu":
        visible = [d for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        env["CUDA_VISIBLE_DEVICES"] = visible[0] if visible else "0"
    return env
