"""Two waits in a local Ray's start, as Ray has them ("ray") and as a lean start shortens them ("lean":
gridbench.gridsearch.local_ray), alternately in fresh processes (issue "Everything around the training").

    python benchmarks/raylet_waits.py [--pairs 8]

Each process starts Ray as a search does (gridbench.gridsearch.ray_session.RaySession, a lean start); the "ray"
processes put back Ray's own pauses for both waits. Each prints, from the raylet's log (raylet.out):
- the raylet's wait for its own object store: from the store's creation ("create_and_mmap_buffer") to the object
  manager's server ("ObjectManager server started"), which the raylet starts once connected to the store;
- the driver's lag: from the raylet's registration ("Raylet of id ... started") to ray.init's return;
and ray.init's whole time (RaySession.ray_start_s).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys

CHILD = """
import datetime, glob, json, os, re, sys, time
from gridbench.gridsearch import local_ray
from gridbench.gridsearch.options import SearchOptions
from gridbench.gridsearch.ray_session import RaySession
if sys.argv[1] == "ray":
    local_ray.LEAN_SYSTEM_CONFIG.clear()  # Ray's own pause between connection attempts (1 s)
    local_ray.wait_until_registered = lambda *args, **kwargs: False  # Ray's own get_node (asks every second)
session = RaySession()
session.start(SearchOptions(), cpus=1, gpus=0)
returned = time.time()
try:
    [log] = glob.glob(os.path.join(session.directory.ray_dir, "session_2*", "logs", "raylet.out"))
    text = open(log).read()
    def at(pattern):
        stamp = re.search(r"^\\[(\\S+ \\S+) .*" + pattern, text, re.M).group(1)
        return datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    print(json.dumps({
        "start": session.ray_start, "ray_start_s": session.ray_start_s,
        "store_wait_s": at("ObjectManager server started") - at("create_and_mmap_buffer"),
        "driver_lag_s": returned - at("Raylet of id"),
    }))
finally:
    session.stop()
"""
MEASURES = ("ray_start_s", "store_wait_s", "driver_lag_s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    args = parser.parse_args()
    from ray import __version__ as ray_version

    print(f"Ray {ray_version}, Python {platform.python_version()}, {os.cpu_count()} cores", flush=True)
    seen = {kind: {key: [] for key in MEASURES} for kind in ("ray", "lean")}
    for pair in range(1, args.pairs + 1):
        for kind, values in seen.items():
            out = subprocess.run([sys.executable, "-c", CHILD, kind], capture_output=True, text=True, timeout=300)
            if out.returncode != 0:
                sys.exit(f"pair {pair}, {kind}: exit {out.returncode}\n{out.stderr[-2000:]}")
            result = json.loads(out.stdout.strip().splitlines()[-1])
            assert result["start"] == "lean", result
            for key in MEASURES:
                values[key].append(result[key])
            print(
                f"pair {pair}, {kind}: ray.init {result['ray_start_s']:.3f} s, the raylet's wait for its store "
                f"{result['store_wait_s']:.3f} s, the driver's lag after the raylet registered "
                f"{result['driver_lag_s']:.3f} s",
                flush=True,
            )
    for kind, values in seen.items():
        for key in MEASURES:
            numbers = values[key]
            print(f"{kind}, {key}: median {statistics.median(numbers):.3f} s [{min(numbers):.3f}-{max(numbers):.3f}]")
        waited = sum(1 for wait in values["store_wait_s"] if wait >= 0.5)
        print(f"{kind}: the raylet waited 0.5 s or more for its store in {waited} of {args.pairs} starts")


if __name__ == "__main__":
    main()
