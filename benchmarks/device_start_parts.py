"""What a JAX worker's GPU start is made of, alone and 4 at once, and which part of it could run before Ray names the
worker's GPU (issue "Everything around the training").

    python benchmarks/device_start_parts.py [--rounds 3] [--gpus 4] [--hold-nvml]    # on a GPU machine with JAX

benchmarks/device_start.py found a fresh process's backend start at 0.498 s alone and 1.499 s with 4 at once on
4 H200s. This splits that start into parts, each timed in the process:
- `libs_s`: the plugin's NVIDIA libraries and its own (jax_plugins.xla_cuda13: cuBLAS, cuDNN, NCCL... and
  xla_cuda_plugin.so, 411 MB in the 0.11.2 wheel) loaded. No GPU is touched: this part can run before the GPU is
  named.
- `cuinit_s`: the CUDA driver's library loaded where nothing had loaded it yet (as the plugin's first call loads it)
  and the driver initialised (cuInit), with the GPU named (CUDA_VISIBLE_DEVICES).
- `context_s`: the GPU's primary context made (cuDevicePrimaryCtxRetain), which XLA's client then takes.
- `client_s`: what is left of `jax.devices()`: the plugin's version checks and XLA's client.
- then `first_op_s` and an MNIST-sized `transfer_s`, as a trial's first steps.
The plugin itself loads its libraries, then checks versions (which calls cuInit), then loads xla_cuda_plugin.so and
makes its client and context; here the .so loads with the libraries and the checks fall in `client_s`. So the parts'
sum is not `jax.devices()`'s time: they differed by up to 0.2 s on 2 and 4 H200s.
Each process also reports when its timed part began and ended (`began_at`, `ended_at`: Unix time) and the PCI bus
of the GPU it got (`bus`). One untimed process starts GPU 0 first, so that no round pays the call's first start.

Each process is fresh and imports JAX before its round starts. The GPU is named as Ray names it: by setting
CUDA_VISIBLE_DEVICES in the process's environment after its start (Ray does so as it hands the worker its trial),
here once every process of the round is ready. Modes: `jax` times `jax.devices()` whole (gridbench today);
`split` times the parts above; `libs-ahead` loads the libraries before the GPU is named, then times the rest.
Placements: one process on GPU 0, one on the last GPU, one process on each of `--gpus` GPUs at once, `--gpus`
processes on GPU 0 at once, and with `--per-gpu K` also K processes on each GPU at once (as packed trials start).
`--hold-nvml` keeps NVML open in this process meanwhile, as gridbench's driver does.
Prints one `START {json}` line per process and a table of medians.

On 2 and 4 H200s, one process per GPU (docs/results/around-training.md, "thirteenth"), only the driver's parts grew
with several at once: cuInit and the context took 0.44-0.71 s together in each of two processes (0.23-0.39 s alone),
1.590-1.671 s in each of four on two 4-H200 leases (0.288-0.411 s alone). The libraries (about 0.1 s) and XLA's
client (about 0.1 s) did not grow. Sixteen at once, four on each of 4 GPUs (`--per-gpu 4`), took 4.542-4.962 s each.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

from device_start import start_together  # beside this script: python benchmarks/device_start_parts.py

CHILD = r"""
import ctypes, json, os, sys, time
mode, gpu = sys.argv[1], sys.argv[2]
import jax, numpy as np
found = {"mode": mode, "gpu": int(gpu)}

def load_libraries():
    import jax_plugins.xla_cuda13 as plugin  # its own helpers: the same files, so its later loads find them loaded
    plugin._load_nvidia_libraries()
    plugin._import_extensions()
    ctypes.CDLL(str(plugin._get_library_path()))

t = time.perf_counter()
def lap(name):
    global t
    now = time.perf_counter()
    found[name] = now - t
    t = now

if mode == "libs-ahead":
    load_libraries()
    lap("ahead_s")
print("READY", flush=True)
sys.stdin.readline()
os.environ["CUDA_VISIBLE_DEVICES"] = gpu  # as Ray names the worker's GPU, after its start
found["began_at"], t = time.time(), time.perf_counter()
if mode == "split":
    load_libraries()
    lap("libs_s")
if mode != "jax":
    cuda = ctypes.CDLL("libcuda.so.1")
    assert cuda.cuInit(0) == 0
    lap("cuinit_s")
    device, context = ctypes.c_int(), ctypes.c_void_p()
    assert cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(context), device) == 0
    lap("context_s")
device = jax.devices()[0]
lap("client_s")
found["ended_at"] = time.time()
bus = ctypes.create_string_buffer(32)
ctypes.CDLL("libcuda.so.1").cuDeviceGetPCIBusId(bus, 32, 0)  # the GPU this process got (cuInit has run)
found["bus"] = bus.value.decode()
t = time.perf_counter()  # the lookup is not the first operation's
jax.device_put(np.ones(4, np.float32), device).block_until_ready()
lap("first_op_s")
jax.device_put(np.zeros((60000, 784), np.float32), device).block_until_ready()
lap("transfer_s")
found["start_s"] = sum(found.get(k, 0.0) for k in ("libs_s", "cuinit_s", "context_s", "client_s"))
print("START " + json.dumps(found), flush=True)
"""

MODES = ("jax", "split", "libs-ahead")
PARTS = ("ahead_s", "libs_s", "cuinit_s", "context_s", "client_s", "start_s", "first_op_s", "transfer_s")


def placements(gpus: int, per_gpu: int = 1) -> dict[str, list[str]]:
    """Each placement's processes, by the GPU each names. With `per_gpu` > 1, also that many on each GPU at once, as
    packed trials start (--gpus-per-trial 1/per_gpu)."""
    found = {
        "gpu 0 alone": ["0"],
        f"gpu {gpus - 1} alone": [str(gpus - 1)],
        f"{gpus} gpus at once": [str(gpu) for gpu in range(gpus)],
        f"{gpus} on gpu 0 at once": ["0"] * gpus,
    }
    if per_gpu > 1:
        found[f"{per_gpu} on each of {gpus} gpus"] = [str(gpu) for gpu in range(gpus) for _ in range(per_gpu)]
    return found


def one_round(mode: str, placement: str, gpus: list[str]) -> list[dict]:
    """A fresh process per entry of `gpus`; all import JAX (and load ahead), then all start their GPU at once."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2"}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    found = start_together([([sys.executable, "-c", CHILD, mode, gpu], env) for gpu in gpus], f"{mode}, {placement}")
    for result in found:
        result["placement"] = placement
        print("START " + json.dumps(result), flush=True)
    if len(found) > 1:  # how far apart the round's processes began and ended their timed part (Unix time)
        began, ended = [r["began_at"] for r in found], [r["ended_at"] for r in found]
        print(
            f"ROUND {placement}, {mode}: began within {max(began) - min(began):.3f} s, "
            f"ended within {max(ended) - min(ended):.3f} s; buses {sorted(r['bus'] for r in found)}",
            flush=True,
        )
    return found


def hold_nvml() -> None:
    import pynvml

    pynvml.nvmlInit()
    for index in range(pynvml.nvmlDeviceGetCount()):
        pynvml.nvmlDeviceGetHandleByIndex(index)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=4)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--hold-nvml", action="store_true", help="keep NVML open in this process meanwhile")
    parser.add_argument("--per-gpu", type=int, default=1, help="also this many processes on each GPU at once")
    args = parser.parse_args()
    if args.hold_nvml:
        hold_nvml()
    modes = args.modes.split(",")
    one_round("jax", "warm-up, not counted", ["0"])  # the call's first start is slower (1.7-2.2 s on H200s)
    results: list[dict] = []
    for _ in range(args.rounds):
        for placement, gpus in placements(args.gpus, args.per_gpu).items():
            for mode in modes:
                results += one_round(mode, placement, gpus)
    print(f"\nmedians (s), NVML held: {args.hold_nvml}; ahead_s before the GPU was named, the rest after")
    print(f"{'placement':<20} {'mode':<11} {'n':>3} " + " ".join(f"{p:>10}" for p in PARTS))
    for placement in placements(args.gpus, args.per_gpu):
        for mode in modes:
            rows = [r for r in results if r["mode"] == mode and r["placement"] == placement]
            cells = " ".join(f"{statistics.median(r.get(p, 0.0) for r in rows):>10.3f}" for p in PARTS)
            print(f"{placement:<20} {mode:<11} {len(rows):>3} {cells}")


if __name__ == "__main__":
    main()
