"""What a trial's NVML calls cost it, before and after gridbench kept NVML started in the worker (issue "Everything
around the training").

Before, every trial started NVML and shut it down twice: once for its GPU's tags (gpu_monitor.describe) and once
around the sampling of its GPU (GpuSampler). Now a worker starts NVML once and asks about its GPU once. Each pattern
runs in processes of its own (NVML counts its starts per process), alternately, and each process times TRIALS
trials' NVML calls, sampling once per trial (the sampler's thread is left out: it is the same in both).

    python benchmarks/nvml_per_trial.py [--processes 3] [--trials 16] [--gpu 0]

Prints each process's first trial and the median of the rest, in seconds. Needs an NVIDIA GPU and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def old_trial(pynvml, index: int) -> None:
    """gridbench before: describe() and the sampler's start and stop each started and shut down NVML."""
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        pynvml.nvmlDeviceGetName(handle), pynvml.nvmlDeviceGetUUID(handle), pynvml.nvmlDeviceGetMemoryInfo(handle)
    finally:
        pynvml.nvmlShutdown()
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    pynvml.nvmlDeviceGetUtilizationRates(handle), pynvml.nvmlDeviceGetMemoryInfo(handle)
    pynvml.nvmlShutdown()


def new_trial(index: int) -> None:
    """gridbench now (gridbench.trial.gpu_monitor)."""
    from gridbench.trial import gpu_monitor

    gpu_monitor.describe(index)
    sampler = gpu_monitor.GpuSampler(index)
    sampler._handle = gpu_monitor.nvml().nvmlDeviceGetHandleByIndex(index)  # start() without its thread
    sampler.sample()


def one_process(pattern: str, trials: int, index: int) -> list[float]:
    import pynvml

    seconds = []
    for _ in range(trials):
        start = time.perf_counter()
        old_trial(pynvml, index) if pattern == "old" else new_trial(index)
        seconds.append(time.perf_counter() - start)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3, help="processes per pattern, alternately")
    parser.add_argument("--trials", type=int, default=16)
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--one", choices=["old", "new"], help=argparse.SUPPRESS)  # a child process's pattern
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one_process(args.one, args.trials, args.gpu)))
        return
    for i in range(args.processes):
        for pattern in ("old", "new"):
            command = [sys.executable, __file__, "--one", pattern, "--trials", str(args.trials), "--gpu", str(args.gpu)]
            seconds = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            rest = statistics.median(seconds[1:])
            print(
                f"{pattern} process {i + 1}: first trial {seconds[0]:.4f} s, median of the other {len(seconds) - 1} {rest:.4f} s"
            )


if __name__ == "__main__":
    main()
