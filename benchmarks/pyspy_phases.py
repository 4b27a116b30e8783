"""Where a search's processes spent their time, from `py-spy record --subprocesses --idle -f raw` (issue
"Everything around the training"): seconds of samples per process, and under chosen frames of the driver and of
the worker that ran the trials.

    py-spy record --subprocesses --idle -r 100 -f raw -o OUT.raw -- python -m gridbench search mnist --device gpu
    python benchmarks/pyspy_phases.py OUT.raw[.xz] [--rate 100]

A sample is one thread's stack at one instant; with --idle, waiting threads are sampled too, so a frame's seconds
are wall seconds of the threads under it (a frame under two threads at once counts twice). py-spy slows what it
samples: read the seconds as shares of one run, not as a run's timings.
"""

from __future__ import annotations

import argparse
import collections
import lzma
import re

RECORD = re.compile(r"(process \d+:.*?) (\d+)\n(?=process |\Z)", re.S)
PROCESS = re.compile(r'process (\d+):"((?:[^"\\]|\\.)*)"')

GRIDBENCH_MAIN = "<module> (gridbench/__main__.py)"  # the driver: `python -m gridbench ...`
RUN_TRIAL = "run_trial (gridbench/trial/trial_runner.py)"
LOAD_ACTOR_CLASS = "FunctionActorManager.load_actor_class (ray/_private/function_manager.py)"  # a trial's unpickling
SETUP_HOOK = "load_and_execute_setup_hook (ray/_private/runtime_env/setup_hook.py)"  # --prestart-workers
# (process, frame, depth): the children shown under each frame; process is "driver" or "worker"
VIEWS = (
    ("driver", "init (ray/_private/worker.py)", 1),
    ("driver", "Node.__init__ (ray/_private/node.py)", 1),
    ("driver", "Node.start_head_processes (ray/_private/node.py)", 1),
    ("driver", "run_search (gridbench/gridsearch/search_runner.py)", 1),
    ("driver", "plan_search (gridbench/gridsearch/plan.py)", 1),
    ("worker", "<module> (ray/_private/workers/default_worker.py)", 1),
    ("worker", SETUP_HOOK, 1),
    ("worker", LOAD_ACTOR_CLASS, 1),
    ("worker", RUN_TRIAL, 1),
    ("worker", "_train_one (gridbench/trial/trial_runner.py)", 1),
    ("worker", "train_fused (gridbench/trial/fused.py)", 1),
    ("worker", "<module> (keras/__init__.py)", 1),  # Keras' import: in the trial's load_train
    ("worker", "<module> (sklearn/__init__.py)", 1),  # within it: Keras' scikit-learn wrapper imports sklearn
    ("worker", "build_mlp (gridbench/workloads/keras_mlp.py)", 1),
    ("worker", "batched_device_put (jax/_src/interpreters/pxla.py)", 1),  # the first one waits for the device
)


def load(path: str) -> list[tuple[list[str], str, int]]:
    """Each record: its frames (line numbers dropped), the pid of the process it was sampled in, and its count."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as file:
        text = file.read()
    records = []
    for match in RECORD.finditer(text):
        stack, count = match.group(1), int(match.group(2))
        pid = PROCESS.findall(stack)[-1][0]
        frames = [re.sub(r":\d+\)$", ")", frame.strip()) for frame in stack.split(";")]
        records.append((frames, pid, count))
    return records


def processes(path: str) -> dict[str, str]:
    """Each sampled process's command line (its first 120 characters), by pid."""
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as file:
        found = {pid: command for pid, command in PROCESS.findall(file.read())}
    return {pid: " ".join(command.split())[:120] for pid, command in found.items()}


def seconds_per_process(records, rate: float) -> collections.Counter:
    totals = collections.Counter()
    for _, pid, count in records:
        totals[pid] += count / rate
    return totals


def children(records, pid: str, parent: str, depth: int, rate: float) -> tuple[float, collections.Counter]:
    """Seconds under `parent` (its first occurrence in each stack) in `pid`, by the `depth` frames below it."""
    total, below = 0.0, collections.Counter()
    for frames, sampled_in, count in records:
        if sampled_in != pid or parent not in frames:
            continue
        at = frames.index(parent)
        total += count / rate
        below[" > ".join(frames[at + 1 : at + 1 + depth]) or "(itself)"] += count / rate
    return total, below


def trials_worker(records, candidates: list[str], rate: float) -> str:
    """The worker that loaded Tune's trial actor's class longest; where none did (each worker imported ahead, with
    --prestart-workers since d83c283), the one that ran the trials longest."""
    for frame in (LOAD_ACTOR_CLASS, RUN_TRIAL):
        seconds = {pid: children(records, pid, frame, 1, rate)[0] for pid in candidates}
        if max(seconds.values(), default=0.0) > 0:
            return max(seconds, key=seconds.get)
    return candidates[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("raw")
    parser.add_argument("--rate", type=float, default=100.0, help="py-spy's samples per second (-r)")
    args = parser.parse_args()
    records, commands = load(args.raw), processes(args.raw)
    totals = seconds_per_process(records, args.rate)
    driver = max(totals, key=lambda pid: children(records, pid, GRIDBENCH_MAIN, 1, args.rate)[0])
    worker = trials_worker(records, [pid for pid in totals if pid != driver], args.rate)
    print("seconds sampled per process (all its threads, waiting included):")
    for pid, seconds in totals.most_common(12):
        role = "driver" if pid == driver else "trials' worker" if pid == worker else ""
        print(f"  {seconds:8.2f} s  {pid:>7} {role:14} {commands.get(pid, '')}")
    hooks = {pid: children(records, pid, SETUP_HOOK, 1, args.rate)[0] for pid in totals}
    for pid, seconds in sorted(hooks.items()):
        if seconds:
            print(f"  Ray's setup hook (--prestart-workers) in {pid}: {seconds:.2f} s")
    for role, frame, depth in VIEWS:
        total, below = children(records, driver if role == "driver" else worker, frame, depth, args.rate)
        print(f"\n{role}: {frame}: {total:.2f} s")
        for name, seconds in below.most_common(8):
            print(f"  {seconds:7.2f} s  {name[-230:]}")


if __name__ == "__main__":
    main()
