"""What every trial of a search shares (TrialContext), what a workload offers a trial, and the worker process's set-up.

The driver builds a TrialContext (gridbench.gridsearch.tuning); Ray carries it to each worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

from gridbench.datasets import Dataset, DataSource
from gridbench.trial import gpu_monitor
from gridbench.trial.gpu_memory import memory_environment, memory_fraction
from gridbench.trial.timing import PhaseClock
from gridbench.workloads import Workload, get_workload

REPEAT_KEY = "repeat"
FUSED_GROUP_KEY = "fused_group"  # under fused execution, a trial's config names its group (TrialContext.fused_groups)


@dataclass(frozen=True)
class TrialContext:
    """What every trial of a search shares; the grid point arrives separately."""

    workload: str
    params: Mapping[str, Any]  # fixed hyperparameters
    data: DataSource
    device: str  # "cpu" or "gpu": what was requested
    backend: str  # Keras backend: tensorflow, jax or torch
    cpus: int  # CPUs Ray reserved for each trial
    seed: int
    gpus_per_trial: float = 0.0  # the GPU share Ray reserved for each trial; 0 on CPU
    compile_cache_dir: str | None = None  # JAX's persistent cache (gridbench.compile_cache); None: off
    inner_axis: str | None = None  # a grid axis trained inside each trial (Workload.inner_axis)
    inner_values: tuple = ()
    # One configuration per distinct program of the search (gridbench.workloads.program_key), in Tune's
    # order: the search's own processes compile them ahead (trial.precompile), or else a GPU worker does.
    programs: tuple[Mapping[str, Any], ...] = ()
    # Compiled ahead by processes of their own (gridbench.gridsearch.precompile): workers then compile none ahead.
    # False where every program was ready in the cache: a GPU worker then loads the others ahead (trial.steps).
    precompiled: bool = False
    user_workload: Workload | None = None  # a user's own model (gridbench.workloads.user_model): no name to look up

    def resolve_workload(self) -> Workload:
        return self.user_workload or get_workload(self.workload, "trial")

    # Fused execution: each group's members as (grid point, repeat); a trial trains one group (trial.fused).
    fused_groups: tuple = ()
    # Under a trial timeout: where each trial notes when its own work began, its framework imported (a file named
    # by its Ray trial id, $GRIDBENCH_TRIAL_ID); the driver's clock starts there (gridsearch.tune_callback).
    started_dir: str | None = None

    @property
    def memory_fraction(self) -> float:
        """The share of its GPU's memory a trial may take (0 on CPU); frameworks without a variable for it cap it."""
        return memory_fraction(self.gpus_per_trial) if self.gpus_per_trial else 0.0


class WorkloadEntry(Protocol):
    """What a workload's `train` names (a module, or a class of static methods).

    Importing it imports its framework; `prepare` then fits the framework to the
    trial's resources (threads, GPU memory), once per worker process.
    """

    def prepare(self, context: TrialContext) -> None: ...
    def open_session(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int) -> WorkloadSession: ...


class WorkloadSession(Protocol):
    """One trial's model; see gridbench.workloads.keras_mlp for one."""

    train_samples: int  # samples one epoch trains on

    def build(self) -> None: ...
    def fit(self, clock: PhaseClock) -> dict[str, float]: ...
    def evaluate(self) -> dict[str, float]: ...
    def actual_device(self) -> str: ...
    def sync(self) -> None: ...
    def facts(self) -> dict[str, str]: ...  # framework, backend and thread counts, as tags


class DeviceMismatch(RuntimeError):
    """The framework placed the model somewhere other than the requested device."""


def configure_process(context: TrialContext) -> None:
    """Sets, before any framework import, what frameworks read at start-up.

    Ray sets OMP_NUM_THREADS=1 in its workers, and does not hide GPUs from a trial
    that asked for none, so both are set explicitly from the trial's resources. A
    GPU trial sees only the GPUs Ray assigned it (Ray sets CUDA_VISIBLE_DEVICES),
    numbered as NVML numbers them, and takes only its share of their memory.
    """
    if context.device != "cpu" and not gpu_monitor.assigned_gpu_indices():
        raise DeviceMismatch("requested gpu but no GPU was assigned to this trial (CUDA_VISIBLE_DEVICES is empty)")
    os.environ.update(process_environment(context.backend, context.device, context.cpus, context.gpus_per_trial))


def process_environment(backend: str, device: str, cpus: int, gpus_per_trial: float) -> dict[str, str]:
    """The variables configure_process sets; a worker that imports ahead sets them too (gridbench.trial.prestart).

    None depends on the GPUs Ray assigns (it sets CUDA_VISIBLE_DEVICES when it hands a trial its worker).
    """
    threads = str(cpus)
    environment = {
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "TF_NUM_INTRAOP_THREADS": threads,
        "TF_NUM_INTEROP_THREADS": threads,
    }
    if backend in ("tensorflow", "jax", "torch"):
        environment["KERAS_BACKEND"] = backend
    if device == "cpu":
        environment.update({"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"})
        return environment
    environment["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    environment.update(memory_environment(backend, gpus_per_trial))
    return environment
