"""How long a search's Ray of one node per GPU takes to start: the nodes after the head at once, or one after another.

    GRIDBENCH_NODE_PER_GPU=1 python benchmarks/gpu_nodes_start.py [--rounds 3] [--gpus 4] [--cpus 4]

Runs on a CPU too: Ray is told of `--gpus` GPUs it does not check. Each round starts a RaySession with
--prestart-workers on a local Ray of one node per GPU (gridbench.gridsearch.gpu_nodes) and prints Ray's whole start
(RaySession's ray_start_s, as a search records it) and the nodes' part of it (gpu_nodes.add_nodes). `at-once` is
gridbench's; `one-after-another` starts them from the calling thread in turn, as 65aaacc to e033fa7 did, but each
node as gridbench's _start_node now makes it (its socket and log files' names). The two ways alternate.
"""

from __future__ import annotations

import argparse
import time


def one_after_another(nodes):
    """The nodes started in turn from this thread, as gridbench did before e033fa7."""
    import ray

    from gridbench.gridsearch import gpu_nodes

    head = ray._private.worker.global_worker.node
    started, log_names = gpu_nodes.StartedNodes([]), gpu_nodes._LogNames()
    for index, (gpu_id, cpus) in enumerate(zip(nodes.gpu_ids[1:], nodes.cpus[1:]), start=1):
        started.nodes.append(gpu_nodes._start_node(head, index, gpu_id, cpus, log_names))
    return started


def one_start(gpus: int, cpus: int, at_once: bool) -> tuple[float, float]:
    from gridbench.gridsearch import gpu_nodes
    from gridbench.gridsearch.options import SearchOptions
    from gridbench.gridsearch.ray_session import RaySession

    add_nodes, took = gpu_nodes.add_nodes, []

    def timed(nodes):
        start = time.perf_counter()
        try:
            return add_nodes(nodes) if at_once else one_after_another(nodes)
        finally:
            took.append(time.perf_counter() - start)

    gpu_nodes.add_nodes = timed
    session = RaySession()
    try:
        session.start(SearchOptions(prestart_workers=True), cpus=cpus, gpus=gpus, trial_share=(1, 1.0))
        if len(session.gpu_nodes) != gpus - 1:
            raise SystemExit("no node per GPU: set GRIDBENCH_NODE_PER_GPU=1")
        return session.ray_start_s, took[0]
    finally:
        gpu_nodes.add_nodes = add_nodes
        session.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--cpus", type=int, default=4)
    args = parser.parse_args()
    for round_ in range(args.rounds):
        for mode in ("at-once", "one-after-another") if round_ % 2 == 0 else ("one-after-another", "at-once"):
            ray_start_s, nodes_s = one_start(args.gpus, args.cpus, mode == "at-once")
            print(f"round {round_ + 1} {mode}: Ray's start {ray_start_s:.3f} s, its nodes {nodes_s:.3f} s", flush=True)


if __name__ == "__main__":
    main()
