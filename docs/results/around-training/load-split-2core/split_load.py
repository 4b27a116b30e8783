"""Diagnosis, not a tool: a saved program's deserialize_and_load split into its parts, as jax.experimental.serialize_executable
does them: the unpickling (with XLA's deserialize_executable, called from its persistent_load, timed apart), then
the unloaded executable's load(), then jax.stages.Compiled. ROUNDS times each part of each .program file.

    python split_load.py ROUNDS CACHE_DIR [CACHE_DIR ...]
"""
import glob, io, os, pickle, sys, time
os.environ.setdefault("KERAS_BACKEND", "jax")
import jax, numpy as np
from jax.experimental import serialize_executable as se
from gridbench.workloads import saved_programs
device = jax.devices()[0]
jax.device_put(np.zeros(4, np.float32), device).block_until_ready()
files = [f for c in sys.argv[2:] for f in sorted(glob.glob(os.path.join(c, "**", "*.program"), recursive=True))]
for path in files:
    blob = open(path, "rb").read()
    payload = pickle.loads(blob[len(saved_programs.MAGIC) + 65:])
    for part in saved_programs.EXECUTABLES:
        serialized, in_tree, out_tree = payload[part]
        for r in range(int(sys.argv[1])):
            xla = []
            class U(se._JaxPjrtUnpickler):
                def persistent_load(self, pid):
                    t = time.perf_counter(); out = super().persistent_load(pid); xla.append(time.perf_counter() - t); return out
            t0 = time.perf_counter()
            unloaded, args_flat, no_kwargs = U(io.BytesIO(serialized), device.client, [device]).load()
            t1 = time.perf_counter()
            args_info = in_tree.unflatten(args_flat)
            loaded = unloaded.load()
            t2 = time.perf_counter()
            compiled = jax.stages.Compiled(loaded, [], args_info, out_tree, no_kwargs=no_kwargs)
            t3 = time.perf_counter()
            print(f"{os.path.basename(os.path.dirname(os.path.dirname(path)))[:22]:22s} {part:12s} unpickle {t1-t0:.4f} (xla deserialize {sum(xla):.4f}, rest {t1-t0-sum(xla):.4f}) load() {t2-t1:.4f} Compiled {t3-t2:.4f} leaves in {in_tree.num_leaves} out {out_tree.num_leaves} pickle bytes {len(serialized)}", flush=True)
