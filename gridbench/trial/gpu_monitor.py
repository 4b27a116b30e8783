"""GPU utilisation and memory, sampled through NVML while a trial trains.

NVML's utilisation is the share of time the GPU ran any kernel, for the whole
device: trials packed on one GPU see each other's work in it. Memory is reported
for the device and, where NVML can see this process, for the trial alone.
"""

from __future__ import annotations

import functools
import os
import statistics
import threading

GIB = 2**30


@functools.cache
def nvml():
    """NVML (pynvml), initialised once in this process and left so until it exits.

    Starting and shutting it down twice in every trial (for its GPU's tags, and around the sampling) cost each trial
    0.048 s of its wall time on a host of 2 H200s (benchmarks/nvml_per_trial.py, docs/results/around-training.md).
    A failed start is not kept: a later call tries again.
    """
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def assigned_gpu_indices() -> list[int]:
    """The GPUs this process was given (Ray sets CUDA_VISIBLE_DEVICES for a GPU trial).

    The search sets CUDA_DEVICE_ORDER=PCI_BUS_ID, so these are NVML's indices too.
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    return [int(d) for d in visible.split(",") if d.strip().isdigit()]


def visible_count() -> int:
    """GPUs this process would start CUDA on: those CUDA_VISIBLE_DEVICES names (up to the first invalid one, as
    CUDA reads it), else every one NVML sees."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return nvml().nvmlDeviceGetCount()
    named = [d.strip() for d in visible.split(",")]
    return next((i for i, d in enumerate(named) if not d or d.startswith("-")), len(named))


def visible_indices() -> list[int]:
    """NVML's indices of the GPUs this process may be given: those CUDA_VISIBLE_DEVICES names, else every one."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        return list(range(nvml().nvmlDeviceGetCount()))
    return assigned_gpu_indices()


@functools.cache
def describe(index: int) -> dict[str, str]:
    """The GPU's model, memory and UUID, as trial tags: asked once per GPU in a worker, whose later trials reuse it."""
    pynvml = nvml()
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    return {
        "gpu.name": _text(pynvml.nvmlDeviceGetName(handle)),
        "gpu.uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
        "gpu.memory_gib": f"{pynvml.nvmlDeviceGetMemoryInfo(handle).total / GIB:.1f}",
    }


def memory_held(index: int) -> str | None:
    """What the GPU holds now, as 'GPU 0: 71.2 of 79.1 GiB in use' (for an out-of-memory failure); None if unknown."""
    try:
        pynvml = nvml()
        memory = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index))
        return f"GPU {index}: {memory.used / GIB:.1f} of {memory.total / GIB:.1f} GiB in use"
    except Exception:  # noqa: BLE001 - no NVML here: the failure is told without it
        return None


class GpuSampler:
    """Samples one GPU every `interval` seconds in a thread, between start() and stop()."""

    def __init__(self, index: int, interval: float = 0.1, pid: int | None = None):
        self.index = index
        self.interval = interval
        self.pid = pid or os.getpid()
        self.utilisation: list[float] = []
        self.memory_used: list[float] = []
        self.process_memory: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._handle = nvml().nvmlDeviceGetHandleByIndex(self.index)
        self._thread = threading.Thread(target=self._run, name="gridbench-gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.sample()  # at least one sample, however short the training

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        pynvml = nvml()
        self.utilisation.append(float(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu))
        self.memory_used.append(pynvml.nvmlDeviceGetMemoryInfo(self._handle).used / GIB)
        try:
            processes = pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle)
        except pynvml.NVMLError:
            return
        for process in processes:
            # usedGpuMemory is None where the driver withholds per-process figures.
            if process.pid == self.pid and process.usedGpuMemory is not None:
                self.process_memory.append(process.usedGpuMemory / GIB)

    def metrics(self) -> dict[str, float]:
        return summarise(self.utilisation, self.memory_used, self.process_memory)


def summarise(utilisation: list[float], memory_used: list[float], process_memory: list[float]) -> dict[str, float]:
    """Mean and peak of each series; a series NVML never filled is left out, not zeroed."""
    metrics: dict[str, float] = {"gpu_samples": float(len(utilisation))}
    for name, series in (
        ("gpu_util_pct", utilisation),
        ("gpu_mem_used_gib", memory_used),
        ("gpu_process_mem_gib", process_memory),
    ):
        if series:
            metrics[f"{name}_mean"] = statistics.fmean(series)
            metrics[f"{name}_peak"] = max(series)
    return metrics


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
