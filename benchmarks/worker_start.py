"""A GPU worker's start: importing Keras on JAX and starting the GPU backend, one after the other or at once.

    python benchmarks/worker_start.py [--runs 3]        # on a GPU machine (Keras, JAX with CUDA)

Each run is a fresh process, as a Ray worker is: it imports JAX, Keras, and puts a small array on the GPU
(the backend's start), either in that order on one thread ("serial"), or with the backend started on a
second thread as soon as JAX is imported, while Keras imports ("overlapped"). The two modes alternate, so that
a drifting machine meets both alike; the process's whole time is read from its start (/proc/self/stat).
The question it answers: does a worker start sooner when the backend starts beside Keras' import?
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import json, os, sys, threading, time
def since_process_start():
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = time.clock_gettime(time.CLOCK_BOOTTIME)
    return boot - ticks / os.sysconf("SC_CLK_TCK")
os.environ["KERAS_BACKEND"] = "jax"
t0 = time.perf_counter()
import jax
t_jax = time.perf_counter()
started = {}
def backend():
    started["devices"] = jax.devices()
    started["done"] = time.perf_counter()
if sys.argv[1] == "overlapped":
    thread = threading.Thread(target=backend)
    thread.start()
    import keras
    t_keras = time.perf_counter()
    thread.join()
else:
    backend()
    import keras
    t_keras = time.perf_counter()
x = jax.device_put(jax.numpy.ones((1024, 1024)))
x.block_until_ready()
t_end = time.perf_counter()
print(json.dumps({"mode": sys.argv[1], "import_jax_s": t_jax - t0, "keras_done_s": t_keras - t0,
       "backend_done_s": started["done"] - t0, "ready_s": t_end - t0, "process_s": since_process_start(),
       "device": str(started["devices"][0])}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    found: dict[str, list[dict]] = {"serial": [], "overlapped": []}
    for _ in range(args.runs):
        for mode in found:
            out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True)
            line = json.loads(out.stdout.strip().splitlines()[-1])
            print(json.dumps(line), flush=True)
            found[mode].append(line)
    for mode, runs in found.items():
        ready = [r["process_s"] for r in runs]
        print(f"{mode}: ready {statistics.median(ready):.3f} s from the process's start (median of {len(ready)}; "
              f"{min(ready):.3f}-{max(ready):.3f})")  # fmt: skip
    print(f"python {sys.version.split()[0]} on {os.uname().nodename}")


if __name__ == "__main__":
    main()
