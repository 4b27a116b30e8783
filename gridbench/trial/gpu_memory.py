"""A trial's GPU memory: its share of the GPU, set for its framework before the framework starts."""

from __future__ import annotations

# A packed trial may fill its share of the GPU's memory less this margin, which is
# left for each process's CUDA context, cuBLAS workspaces and allocator slack.
MEMORY_HEADROOM = 0.1


def memory_fraction(gpus_per_trial: float) -> float:
    """The share of one GPU's memory a trial may take."""
    return round(min(gpus_per_trial, 1.0) * (1 - MEMORY_HEADROOM), 4)


def memory_environment(backend: str, gpus_per_trial: float) -> dict[str, str]:
    """Variables each framework reads at import so that packed trials fit on one GPU.

    JAX preallocates 75% of the GPU per process by default (four packed trials ran
    out of memory): every JAX trial grows to its share instead, capped at it. Preallocating
    made a whole-GPU worker's first operation take 1.0-1.6 s on an H100, against 0.004 s
    growing, and its first trial's setup 1.62-1.90 s against 0.65-0.87 s; packed 4 to a
    GPU on 4 H200s, the 10-epoch grid took 13.77 s preallocating against 10.37 s growing
    (docs/results/around-training.md).
    TensorFlow takes nearly all memory unless told to grow on demand.
    PyTorch allocates on demand; its cap is set after import (see keras_mlp.prepare).
    """
    if backend == "jax":
        return {
            "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
            "XLA_PYTHON_CLIENT_MEM_FRACTION": f"{memory_fraction(gpus_per_trial)}",  # the cap it grows to
        }
    if backend == "tensorflow":
        return {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    return {}
