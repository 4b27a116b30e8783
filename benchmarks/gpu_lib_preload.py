"""Whether loading JAX's GPU libraries ahead, without starting a device, shortens a fresh process's device start
(issue "Everything around the training"): a prestarted worker could load them before Ray names its GPU.

    CUDA_VISIBLE_DEVICES=0 python benchmarks/gpu_lib_preload.py cold|preload

One fresh process: `import jax`; with `preload`, every shared library of JAX's CUDA plugin package and of the
nvidia-* wheels loaded by ctypes (RTLD_GLOBAL), which starts no device; then `jax.devices()` and a first transfer,
synchronised. Prints `PRELOAD {json}` with each part's seconds. Run it alternately in both modes.
"""

import ctypes
import glob
import importlib.util
import json
import os
import sys
import time

start = time.perf_counter()
import jax  # noqa: E402 - timed
import numpy as np  # noqa: E402

imported = time.perf_counter()


def libraries() -> list[str]:
    """The CUDA plugin's shared objects last, after the nvidia-* wheels' libraries they link against."""
    found = []
    nvidia = importlib.util.find_spec("nvidia")
    for folder in list(nvidia.submodule_search_locations) if nvidia else []:
        found += sorted(glob.glob(os.path.join(folder, "*", "lib", "*.so*")))
    plugins = importlib.util.find_spec("jax_plugins")
    for folder in list(plugins.submodule_search_locations) if plugins else []:
        found += sorted(glob.glob(os.path.join(folder, "*", "*.so")))
    return found


loaded, failed = 0, []
if sys.argv[1] == "preload":
    for path in libraries():
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
            loaded += 1
        except OSError as err:
            failed.append(f"{os.path.basename(path)}: {str(err)[:80]}")
preloaded = time.perf_counter()
devices = jax.devices()
backend = time.perf_counter()
jax.device_put(np.ones(4, np.float32)).block_until_ready()
first_op = time.perf_counter()
found = {
    "mode": sys.argv[1],
    "import_s": imported - start,
    "preload_s": preloaded - imported,
    "libraries_loaded": loaded,
    "libraries_failed": failed[:5],
    "devices_s": backend - preloaded,
    "first_op_s": first_op - backend,
    "device": str(devices[0]),
}
print("PRELOAD " + json.dumps(found), flush=True)
