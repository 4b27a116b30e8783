"""A worker's device start on a machine of several GPUs: alone, or in 4 processes at once, and what of it could run
before Ray names the worker's GPU (issue "Everything around the training").

    python benchmarks/device_start.py [--rounds 3] [--gpus 4]     # on a GPU machine with JAX

Each process is fresh, as a Ray worker is, and grows to a whole GPU's cap as a gridbench trial does
(XLA_PYTHON_CLIENT_PREALLOCATE=false, fraction 0.9). Its timed part is what a worker's first trial does with its
device: `jax.devices()` (the backend's start), a first small operation, an MNIST-sized transfer, a small program
(compiled: no cache) and a second transfer. Modes:
- cold: CUDA_VISIBLE_DEVICES names the process's GPU before it starts (Ray's way: it names the GPU as it hands
  the worker its trial);
- cuinit-ahead: every GPU visible, the CUDA driver initialised (cuInit) before the GPU is named; then
  `jax_cuda_visible_devices` names it and the timed part runs;
- backend-ahead: every GPU visible and JAX's backend started on all of them before the GPU is named; the timed part
  then runs on the named GPU as JAX's default device.
On JAX 0.11.2 (4 H200s), cuinit-ahead failed on every GPU but GPU 0: naming one other GPU in
`jax_cuda_visible_devices` made the first operation fail ("Device id 2 is out of range [0, 1)"). A process that
fails prints its traceback and no START line; the summary counts the processes that reported (n).
The ahead part is timed apart. Every process of a round does its ahead part, then all start their timed part at
once. Rounds alternate the modes, at 1 process (GPU 0) and at `--gpus` at once. Prints one `START {json}` line per
process and a summary of medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, json, os, sys, time
mode, gpu = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
import jax, jax.numpy as jnp, numpy as np
found = {"mode": mode, "gpu": gpu, "import_s": time.perf_counter() - t0}
ahead = time.perf_counter()
if mode == "cuinit-ahead":
    assert ctypes.CDLL("libcuda.so.1").cuInit(0) == 0
elif mode == "backend-ahead":
    jax.devices()
found["ahead_s"] = time.perf_counter() - ahead
print("READY", flush=True)
sys.stdin.readline()  # every process of the round is ready: the GPU is named now
t = time.perf_counter()
def lap(name):
    global t
    now = time.perf_counter()
    found[name] = now - t
    t = now
if mode == "cuinit-ahead":
    jax.config.update("jax_cuda_visible_devices", str(gpu))
device = jax.devices()[gpu if mode == "backend-ahead" else 0]
lap("backend_s")
with jax.default_device(device):
    jax.device_put(np.ones(4, np.float32), device).block_until_ready()
    lap("first_op_s")
    data = jax.device_put(np.zeros((60000, 784), np.float32), device).block_until_ready()
    lap("transfer_s")
    weights = jax.device_put(np.ones((784, 2048), np.float32), device)
    jax.jit(lambda a, w: jnp.tanh(a @ w).sum())(data, weights).block_until_ready()
    lap("program_s")
    jax.device_put(np.ones((60000, 784), np.float32), device).block_until_ready()
    lap("second_transfer_s")
found["device_s"] = sum(found[k] for k in ("backend_s", "first_op_s", "transfer_s"))
found["device"] = str(device)
print("START " + json.dumps(found), flush=True)
"""

MODES = ("cold", "cuinit-ahead", "backend-ahead")
PARTS = ("ahead_s", "backend_s", "first_op_s", "transfer_s", "device_s", "program_s", "second_transfer_s")


def start_together(commands: list[tuple[list[str], dict[str, str]]], what: str) -> list[dict]:
    """A fresh process per (argv, env), each printing READY once its untimed part is done; once all are ready, all
    are told to go (one line on stdin each). What they printed on their `START {json}` lines, parsed.

    benchmarks/device_start_parts.py starts its processes this way too.
    """
    children = [
        subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for argv, env in commands
    ]
    for child in children:
        line = child.stdout.readline()
        if line.strip() != "READY":
            raise SystemExit(f"{what}: a process did not get ready: {line!r}")
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    found = []
    for child in children:
        out, _ = child.communicate(timeout=300)
        found += [json.loads(line[6:]) for line in out.splitlines() if line.startswith("START ")]
    return found


def one_round(mode: str, gpus: int) -> list[dict]:
    """`gpus` fresh processes, GPU i each; all ready (ahead part done), then all timed at once."""
    commands = []
    for gpu in range(gpus):
        env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9"}
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        if mode == "cold":
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        else:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        commands.append(([sys.executable, "-c", CHILD, mode, str(gpu)], env))
    found = start_together(commands, mode)
    for result in found:
        result["at_once"] = gpus
        print("START " + json.dumps(result), flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gpus", type=int, default=4)
    args = parser.parse_args()
    results: list[dict] = []
    for _ in range(args.rounds):
        for at_once in sorted({1, args.gpus}):
            for mode in MODES:
                results += one_round(mode, at_once)
    print("\nmedians (s); at_once processes on as many GPUs; ahead_s before the GPU was named, the rest after")
    print(f"{'mode':<14} {'at once':>7} {'n':>3} " + " ".join(f"{p:>17}" for p in PARTS))
    for at_once in sorted({1, args.gpus}):
        for mode in MODES:
            rows = [r for r in results if r["mode"] == mode and r["at_once"] == at_once]
            cells = " ".join(f"{statistics.median(r[p] for r in rows):>17.3f}" for p in PARTS)
            print(f"{mode:<14} {at_once:>7} {len(rows):>3} {cells}")


if __name__ == "__main__":
    main()
