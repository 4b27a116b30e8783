"""A local Ray's start and a Tune trial actor's start on it, with Ray started as ray.init starts it ("ray") and as
gridbench starts it ("lean": gridbench.gridsearch.local_ray), alternately in fresh processes (issue "Everything
around the training").

    python benchmarks/ray_start_ab.py [--pairs 5]

Each process starts Ray as a search does (gridbench.gridsearch.ray_session, GRIDBENCH_RAY_START choosing how) and
times it, then times one actor with Tune's runtime_env from its creation to its first answer, which is what a
search's first trial waits for before Tune's own import.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = """
import json, os, sys, time
import ray
from gridbench.gridsearch.options import SearchOptions
from gridbench.gridsearch.plain_workers import tune_actor_runtime_env
from gridbench.gridsearch.ray_session import RaySession
session = RaySession()
session.start(SearchOptions(), cpus=1, gpus=0)
try:
    @ray.remote(num_cpus=1, runtime_env=tune_actor_runtime_env())
    class Trial:
        def pid(self):
            return os.getpid()
    start = time.perf_counter()
    ray.get(Trial.remote().pid.remote())
    print(json.dumps({"start": session.ray_start, "ready_s": time.perf_counter() - start,
                      "ray_start_s": session.ray_start_s}))
finally:
    session.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    ready: dict[str, list[float]] = {"ray": [], "lean": []}
    ray_start: dict[str, list[float]] = {"ray": [], "lean": []}
    for pair in range(1, args.pairs + 1):
        for choice in ready:
            env = {**os.environ, "GRIDBENCH_RAY_START": choice}
            out = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                sys.exit(f"pair {pair}, {choice}: exit {out.returncode}\n{out.stderr[-2000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["start"] == choice, result
            ready[choice].append(result["ready_s"])
            ray_start[choice].append(result["ray_start_s"])
            print(
                f"pair {pair}, {choice}: actor ready {result['ready_s']:.3f} s (Ray's start {result['ray_start_s']:.2f} s)",
                flush=True,
            )
    for choice in ready:
        for what, values in (("Ray's start", ray_start[choice]), ("actor ready", ready[choice])):
            print(f"{choice}, {what}: median {statistics.median(values):.3f} s [{min(values):.3f}-{max(values):.3f}]")


if __name__ == "__main__":
    main()
