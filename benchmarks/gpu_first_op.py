"""One fresh process on one GPU: JAX's start, its first operation (where JAX preallocates, when told to), an
MNIST-sized transfer and a small program; prints `AB {json}`. For issue "Everything around the training".

    CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=true|false XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 \
        python benchmarks/gpu_first_op.py LABEL [BYTES]

BYTES: then asks for that many bytes more, to show whether the cap (the memory fraction) holds.
benchmarks/preallocate_ab.sh runs it alternately with both settings.
"""

import json
import sys
import time

start = time.perf_counter()
import jax  # noqa: E402 - timed
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

imported = time.perf_counter()
jax.devices()
backend = time.perf_counter()
jax.device_put(np.ones(4, np.float32)).block_until_ready()
first_op = time.perf_counter()
data = jax.device_put(np.zeros((60000, 784), np.float32)).block_until_ready()
transferred = time.perf_counter()
weights = jnp.ones((784, 512))
jax.jit(lambda a, w: (a @ w).sum())(data, weights).block_until_ready()
program = time.perf_counter()
stats = jax.devices()[0].memory_stats() or {}
found = {
    "label": sys.argv[1],
    "import_s": imported - start,
    "backend_s": backend - imported,
    "first_op_s": first_op - backend,
    "transfer_s": transferred - first_op,
    "program_s": program - transferred,
    "limit": stats.get("bytes_limit"),
    "reserved": stats.get("bytes_reserved"),
}
if len(sys.argv) > 2:
    try:
        jnp.zeros(int(sys.argv[2]) // 4, jnp.float32).block_until_ready()
        found["big_alloc"] = "ok"
    except Exception as err:  # noqa: BLE001 - the out-of-memory error is the answer
        found["big_alloc"] = f"{type(err).__name__}: {str(err).splitlines()[0][:160]}"
print("AB " + json.dumps(found), flush=True)
