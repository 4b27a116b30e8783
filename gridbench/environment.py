"""The machine and software a measurement was taken on, recorded with every search.

Results from different machines must never mix silently, so each search carries
the CPU model and core count, the GPUs (through NVML), and library versions.
"""

from __future__ import annotations

import os
import platform
import socket
from importlib import metadata

LIBRARIES = (
    "gridbench",
    "keras",
    "tensorflow-cpu",
    "tensorflow",
    "jax",
    "jaxlib",
    "jax-cuda12-plugin",
    "jax-cuda13-plugin",
    "torch",
    "scikeras",
    "scikit-learn",
    "numpy",
    "ray",
    "mlflow",
    "mlflow-skinny",
    "cupy-cuda12x",
    "cupy-cuda13x",
)


# Variables that change what the frameworks compile or how they compute, recorded where set: on an H100,
# XLA_FLAGS=--xla_gpu_enable_triton_gemm=false cut an MLP program's compilation from 5.2 s to 1.8 s and made its
# epochs 1.4x slower (docs/results/h100-issue15.md).
TUNING_VARIABLES = (
    "XLA_FLAGS",
    "TF_XLA_FLAGS",
    "JAX_DEFAULT_MATMUL_PRECISION",
    "JAX_ENABLE_X64",
    "NVIDIA_TF32_OVERRIDE",
    "TF_ENABLE_ONEDNN_OPTS",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_GPU_ALLOCATOR",
    "PYTORCH_CUDA_ALLOC_CONF",
)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def usable_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def library_versions() -> dict[str, str]:
    versions = {}
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def gpus() -> list[dict[str, str]]:
    """The GPUs NVML sees, with driver and CUDA versions; empty where there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, or no device: no GPU for us
        return []
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            found.append(
                {
                    "index": str(index),
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_gib": f"{pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**30:.1f}",
                    "driver": driver,
                    "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
                }
            )
        return found
    finally:
        pynvml.nvmlShutdown()


def visible_gpu_count() -> int:
    """GPUs this process may use: NVML's count, narrowed by CUDA_VISIBLE_DEVICES."""
    count = len(gpus())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        count = min(count, len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"]))
    return count


def cuda_driver_major() -> int | None:
    """The CUDA major version the NVIDIA driver supports (nvidia-smi's "CUDA Version"); None without one."""
    found = gpus()
    return int(found[0]["cuda_driver"].split(".")[0]) if found else None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def collect() -> dict[str, str]:
    """Flat tags describing this host, ready for MLflow."""
    import psutil

    tags = {
        "host": socket.gethostname(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "cpu.model": cpu_model(),
        "cpu.cores_usable": str(usable_cores()),
        "cpu.cores_physical": str(psutil.cpu_count(logical=False) or "unknown"),
        "memory_gib": f"{psutil.virtual_memory().total / 2**30:.1f}",
    }
    tags.update({f"version.{name}": version for name, version in library_versions().items()})
    tags.update({f"env.{name}": os.environ[name] for name in TUNING_VARIABLES if os.environ.get(name)})
    found = gpus()
    tags["gpu.count"] = str(len(found))
    for gpu in found:
        for key, value in gpu.items():
            if key != "index":
                tags[f"gpu.{gpu['index']}.{key}"] = value
    return tags
