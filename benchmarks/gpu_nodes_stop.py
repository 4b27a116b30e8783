"""How long a search's Ray of one node per GPU takes to end: its nodes' raylets first, or left to the end by PID.

    GRIDBENCH_NODE_PER_GPU=1 python benchmarks/gpu_nodes_stop.py [--rounds 3] [--gpus 2]

Runs on a CPU too: Ray is told of `--gpus` GPUs it does not check. Each round starts a RaySession with
--prestart-workers on a local Ray of one node per GPU (gridbench.gridsearch.gpu_nodes), holds one actor on each
node's GPU, and times RaySession.stop: `raylets-first` as gridbench ends them (StartedNodes.stop, then Ray's shutdown
and the end by PID), `by-pid` with StartedNodes.stop skipped (every process SIGTERMed at once, SIGKILL 3 s later), as
d50b146 ended them. The two ways alternate.
"""

from __future__ import annotations

import argparse
import os
import time


def one_stop(gpus: int, by_pid: bool) -> float:
    import ray

    from gridbench.gridsearch.options import SearchOptions
    from gridbench.gridsearch.ray_session import RaySession

    session = RaySession()
    session.start(SearchOptions(prestart_workers=True), cpus=gpus, gpus=gpus, trial_share=(1, 1.0))
    if len(session.gpu_nodes) != gpus - 1:
        raise SystemExit("no node per GPU: set GRIDBENCH_NODE_PER_GPU=1")

    @ray.remote(num_cpus=1, num_gpus=1)
    class Holds:
        def pid(self) -> int:
            time.sleep(0.3)  # held at once, one on each node
            return os.getpid()

    actors = [Holds.remote() for _ in range(gpus)]
    ray.get([a.pid.remote() for a in actors], timeout=120)
    if by_pid:
        session.gpu_nodes.stop = lambda: None  # d50b146: the nodes left to the end by PID
    start = time.perf_counter()
    session.stop()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=2)
    args = parser.parse_args()
    for round_ in range(args.rounds):
        for mode in ("raylets-first", "by-pid") if round_ % 2 == 0 else ("by-pid", "raylets-first"):
            print(f"round {round_ + 1} {mode}: stop {one_stop(args.gpus, mode == 'by-pid'):.3f} s", flush=True)


if __name__ == "__main__":
    main()
