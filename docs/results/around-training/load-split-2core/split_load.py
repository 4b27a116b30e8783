"""Diagnosis, not a tool: a saved program's deserialize_and_load split into its parts, as
jax.experimental.serialize_executable does them: the unpickling (with XLA's deserialize_executable, which its
persistent_load calls, timed apart), then the unloaded executable's load(), then jax.stages.Compiled. ROUNDS
times each part of each .program file under the caches named, in one process, the device started first.

    python split_load.py ROUNDS CACHE_DIR [CACHE_DIR ...]
"""

import glob
import io
import os
import pickle
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import serialize_executable  # noqa: E402

from gridbench.workloads import saved_programs  # noqa: E402


class TimedUnpickler(serialize_executable._JaxPjrtUnpickler):
    """JAX's unpickler, with the time spent in XLA's deserialize_executable kept apart."""

    def __init__(self, *args):
        super().__init__(*args)
        self.xla_s = 0.0

    def persistent_load(self, pid):
        start = time.perf_counter()
        loaded = super().persistent_load(pid)
        self.xla_s += time.perf_counter() - start
        return loaded


def split_load(serialized: bytes, in_tree, out_tree, device) -> dict:
    start = time.perf_counter()
    unpickler = TimedUnpickler(io.BytesIO(serialized), device.client, [device])
    unloaded, args_flat, no_kwargs = unpickler.load()
    unpickled = time.perf_counter()
    loaded = unloaded.load()
    load_done = time.perf_counter()
    jax.stages.Compiled(loaded, [], in_tree.unflatten(args_flat), out_tree, no_kwargs=no_kwargs)
    return {
        "unpickle": unpickled - start,
        "xla": unpickler.xla_s,
        "load": load_done - unpickled,
        "compiled": time.perf_counter() - load_done,
    }


def main() -> None:
    rounds, caches = int(sys.argv[1]), sys.argv[2:]
    device = jax.devices()[0]
    jax.device_put(np.zeros(4, np.float32), device).block_until_ready()
    files = [f for c in caches for f in sorted(glob.glob(os.path.join(c, "**", "*.program"), recursive=True))]
    for path in files:
        with open(path, "rb") as file:
            payload = pickle.loads(file.read()[len(saved_programs.MAGIC) + 65 :])
        cache = os.path.basename(os.path.dirname(os.path.dirname(path)))[:22]
        for part in saved_programs.EXECUTABLES:
            serialized, in_tree, out_tree = payload[part]
            for _ in range(rounds):
                t = split_load(serialized, in_tree, out_tree, device)
                print(
                    f"{cache:22s} {part:12s} unpickle {t['unpickle']:.4f} (xla deserialize {t['xla']:.4f}, "
                    f"rest {t['unpickle'] - t['xla']:.4f}) load() {t['load']:.4f} Compiled {t['compiled']:.4f} "
                    f"leaves in {in_tree.num_leaves} out {out_tree.num_leaves} pickle bytes {len(serialized)}",
                    flush=True,
                )


main()
