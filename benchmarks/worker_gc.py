"""What the collection after a trial's worker's imports costs (gridbench.collector): in fresh processes, the imports
a worker's first trial does with the collector paused (Ray Tune's trainable, JAX, Keras, the MLP workload), then one
full collection, timed, with the objects it walked and freed. 7390c4d skipped that collection in trials' workers; on
one H100 the headline's first trial was no faster, and the change was taken back (docs/results/around-training.md,
"ninth").

    KERAS_BACKEND=jax python benchmarks/worker_gc.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = """
import gc, time
gc.disable()
from ray.tune.trainable import function_trainable
import jax
from gridbench.trial.keras_import import import_keras
import_keras()
from gridbench.workloads import keras_mlp
objects = len(gc.get_objects())
start = time.perf_counter()
freed = gc.collect()
print(f"collect {time.perf_counter() - start:.3f} s: {objects} objects walked, {freed} freed")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for _ in range(args.repeats):
        done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, check=True)
        print(done.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
