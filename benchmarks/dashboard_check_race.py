"""Nodes started at once, with Ray's dashboard check answered once (gridbench's) or asked by each node's thread.

    GRIDBENCH_NODE_PER_GPU=1 python benchmarks/dashboard_check_race.py [--rounds 5] [--gpus 3]

Runs on a CPU: Ray is told of `--gpus` GPUs it does not check. Each round, in a fresh process (the race is in the
first imports of the process), starts a RaySession with --prestart-workers on a local Ray of one node per GPU (gridbench.gridsearch.gpu_nodes.add_nodes, the nodes after the head at once) and
prints whether every node registered, and what Ray's check (`get_dashboard_dependency_error`, which imports the
dashboard's optional packages) answered each thread that asked it. `each` lets every node's thread ask, as e033fa7
stopped them doing; `once` is gridbench's. Where the packages are missing, a node whose thread found no error starts
its dashboard agent in full, which dies on the import, and its raylet never registers (Ray waits 30 s for it).
"""

from __future__ import annotations

import argparse
import contextlib
import subprocess
import sys
import threading
import time


def one_round(gpus: int, once: bool) -> str:
    from ray._private import utils

    from gridbench.errors import UserError
    from gridbench.gridsearch import gpu_nodes
    from gridbench.gridsearch.options import SearchOptions
    from gridbench.gridsearch.ray_session import RaySession

    rays_check, answers = utils.get_dashboard_dependency_error, []

    def traced():
        answer = rays_check()
        answers.append(f"{threading.current_thread().name}: {type(answer).__name__ if answer else 'no error'}")
        return answer

    utils.get_dashboard_dependency_error = traced
    check_once = gpu_nodes._dashboard_check_once
    if not once:
        gpu_nodes._dashboard_check_once = contextlib.nullcontext
    session, start = RaySession(), time.perf_counter()
    try:
        session.start(SearchOptions(prestart_workers=True), cpus=gpus, gpus=gpus, trial_share=(1, 1.0))
        outcome = f"{len(session.gpu_nodes)} of {gpus - 1} nodes registered"
    except UserError as err:
        outcome = f"failed: {err}"
    finally:
        took = time.perf_counter() - start
        gpu_nodes._dashboard_check_once = check_once
        utils.get_dashboard_dependency_error = rays_check
        session.stop()
    return f"{outcome} in {took:.1f} s; asked: {'; '.join(sorted(answers))}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--gpus", type=int, default=3)
    parser.add_argument("--one", choices=("once", "each"), help="one round in this process (the rounds' own call)")
    args = parser.parse_args()
    if args.one:
        print(one_round(args.gpus, args.one == "once"), flush=True)
        return
    for round_ in range(args.rounds):
        for mode in ("once", "each") if round_ % 2 == 0 else ("each", "once"):
            command = [sys.executable, __file__, "--gpus", str(args.gpus), "--one", mode]
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
            said = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else f"exit {done.returncode}"
            print(f"round {round_ + 1} {mode}: {said}", flush=True)


if __name__ == "__main__":
    main()
