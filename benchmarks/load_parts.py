"""A saved program's load (gridbench.workloads.saved_programs), its executables one after the other against
both at once on two threads, ROUNDS times in one process, the device started first.

    python benchmarks/load_parts.py ROUNDS CACHE_DIR [CACHE_DIR ...] [--marks]

A trial's program holds two executables (saved_programs.EXECUTABLES): the epoch's and the evaluation's. Loading
them one after the other costs the sum of their loads; if XLA's deserialisation lets go of Python's lock, loading
them at once costs about the longer one. Each round times both ways on the same files; the first round is shown
apart, since it also pays the process's one-off costs. --marks writes each load's start and end (time.time(), as
XLA's log lines are stamped) to standard error, to place XLA's own log lines (TF_CPP_VMODULE) inside a load.
"""

from __future__ import annotations

import argparse
import glob
import os
import pickle
import statistics
import sys
import threading
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import serialize_executable  # noqa: E402

from gridbench.workloads import saved_programs  # noqa: E402


def payload_of(path: str) -> dict:
    with open(path, "rb") as file:
        return pickle.loads(file.read()[len(saved_programs.MAGIC) + 65 :])


MARKS = False
KEPT: list = []


def mark(what: str) -> None:
    """`what`, stamped as XLA's log lines are (UTC, microseconds), on standard error."""
    now = time.time()
    stamp = time.strftime("%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}"
    print(f"mark {stamp} {what} on {threading.current_thread().name}", file=sys.stderr, flush=True)


def load_one(payload: dict, part: str, device) -> float:
    if MARKS:
        mark(f"start {part}")
    start = time.perf_counter()
    loaded = serialize_executable.deserialize_and_load(*payload[part], device.client, [device])
    seconds = time.perf_counter() - start
    if MARKS:
        mark(f"end {part} {seconds:.4f} s")
    KEPT.append(loaded)  # freed after the round, outside the timed load (freeing one took as long as loading it)
    return seconds


def load_at_once(payload: dict, device) -> tuple[float, list[float]]:
    """Both executables on a thread each: the wall time, and each thread's own load."""
    seconds: dict[str, float] = {}

    def worker(part: str) -> None:
        seconds[part] = load_one(payload, part, device)

    threads = [threading.Thread(target=worker, args=(part,)) for part in saved_programs.EXECUTABLES]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - start, [seconds[part] for part in saved_programs.EXECUTABLES]


def one_file(path: str, rounds: int, device) -> None:
    payload = payload_of(path)
    sizes = {part: len(payload[part][0]) for part in saved_programs.EXECUTABLES}
    print(
        f"{os.path.dirname(os.path.dirname(path))} {os.path.basename(path)[:12]} serialized bytes {sizes}", flush=True
    )
    after_each, at_once = [], []
    for index in range(rounds):
        parts = [load_one(payload, part, device) for part in saved_programs.EXECUTABLES]
        wall, threads = load_at_once(payload, device)
        print(
            f"  round {index}: one after the other {sum(parts):.4f} (epoch {parts[0]:.4f}, evaluation "
            f"{parts[1]:.4f})  at once {wall:.4f} (epoch {threads[0]:.4f}, evaluation {threads[1]:.4f})",
            flush=True,
        )
        KEPT.clear()
        if index:
            after_each.append(sum(parts))
            at_once.append(wall)
    if after_each:
        print(
            f"  rounds 1-{rounds - 1}, median [min-max]: one after the other {statistics.median(after_each):.4f} "
            f"[{min(after_each):.4f}-{max(after_each):.4f}]  at once {statistics.median(at_once):.4f} "
            f"[{min(at_once):.4f}-{max(at_once):.4f}]",
            flush=True,
        )


def main() -> None:
    global MARKS
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int)
    parser.add_argument("caches", nargs="+")
    parser.add_argument("--marks", action="store_true", help="each load's start and end on standard error")
    args = parser.parse_args()
    rounds, caches, MARKS = args.rounds, args.caches, args.marks
    device = jax.devices()[0]
    jax.device_put(np.zeros(4, np.float32), device).block_until_ready()
    print(f"device {device.device_kind}, jax {jax.__version__}", flush=True)
    files = [f for c in caches for f in sorted(glob.glob(os.path.join(c, "**", "*.program"), recursive=True))]
    for path in files:
        one_file(path, rounds, device)


if __name__ == "__main__":
    main()
