"""One trial, as it runs inside a Ray worker: a workload trained on a device, timed.

The process is configured before the framework is imported (backend, visible
devices, thread counts from the CPUs Ray gave the trial), the device the framework
actually used is read back from it, and every phase is timed on a synchronised
clock. The trial returns a TrialOutcome; it never writes to MLflow itself, so that
concurrent trials cannot race in the store.
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from gridbench.datasets import Dataset, DataSource
from gridbench.datasets.read import load_shared
from gridbench.tracking import schema
from gridbench.tracking.schema import TrialStatus
from gridbench.trial import gpu_monitor
from gridbench.trial.memory import memory_environment, memory_fraction
from gridbench.trial.outcome import TrialOutcome
from gridbench.trial.timing import PhaseClock, epoch_summary
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
    precompiled: bool = False
    user_workload: Workload | None = None  # a user's own model (gridbench.workloads.user), which has no name to look up

    def resolve_workload(self) -> Workload:
        return self.user_workload or get_workload(self.workload, "trial")

    # Fused execution: each group's members as (grid point, repeat); a trial trains one group (trial.fused).
    fused_groups: tuple = ()

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
    threads = str(context.cpus)
    if context.backend in ("tensorflow", "jax", "torch"):
        os.environ["KERAS_BACKEND"] = context.backend
    os.environ.update(
        {
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "OMP_NUM_THREADS": threads,
            "MKL_NUM_THREADS": threads,
            "OPENBLAS_NUM_THREADS": threads,
            "TF_NUM_INTRAOP_THREADS": threads,
            "TF_NUM_INTEROP_THREADS": threads,
        }
    )
    if context.device == "cpu":
        os.environ.update({"CUDA_VISIBLE_DEVICES": "", "JAX_PLATFORMS": "cpu"})
        return
    if not gpu_monitor.assigned_gpu_indices():
        raise DeviceMismatch("requested gpu but no GPU was assigned to this trial (CUDA_VISIBLE_DEVICES is empty)")
    os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    os.environ.update(memory_environment(context.backend, context.gpus_per_trial))


def _blas_threads() -> str:
    from threadpoolctl import threadpool_info

    return ",".join(str(pool["num_threads"]) for pool in threadpool_info() if pool.get("user_api") == "blas") or "none"


def _matches(requested: str, actual: str) -> bool:
    return actual.split(":")[0] == requested


def run_trial(config: Mapping[str, Any], context: TrialContext) -> TrialOutcome:
    """Trains one grid point (or one group, see _train_group) and returns its outcome; failures are returned."""
    started_at = time.time()
    start = time.perf_counter()
    repeat = int(config.get(REPEAT_KEY, 0))
    hyperparameters = {**context.params, **{k: v for k, v in config.items() if k not in (REPEAT_KEY, FUSED_GROUP_KEY)}}
    outcome = TrialOutcome(
        TrialStatus.FINISHED,
        started_at,
        started_at,
        repeat,
        tags={schema.HOST: socket.gethostname(), schema.PID: str(os.getpid()), schema.DEVICE_REQUESTED: context.device},
    )
    try:
        configure_process(context)
        gpus = gpu_monitor.assigned_gpu_indices() if context.device == "gpu" else []
        if gpus:
            outcome.tags.update({schema.GPU_ASSIGNED: ",".join(map(str, gpus)), **gpu_monitor.describe(gpus[0])})
        imported = time.perf_counter()
        entry: WorkloadEntry = context.resolve_workload().load_train()
        entry.prepare(context)
        import_s = time.perf_counter() - imported  # about 0 in a reused worker
        train = _train_group if context.inner_axis else _train_one
        if context.fused_groups:
            from gridbench.trial.fused import train_fused

            train = functools.partial(train_fused, members=context.fused_groups[int(config[FUSED_GROUP_KEY])])
        train(outcome, entry, context, hyperparameters, repeat, gpus, import_s, start)
    except Exception as err:
        outcome.status = TrialStatus.FAILED
        outcome.error = f"{type(err).__name__}: {err}".splitlines()[0][:500]
        outcome.traceback = traceback.format_exc()
    outcome.ended_at = time.time()
    outcome.metrics[schema.TRIAL_WALL_S] = time.perf_counter() - start
    return outcome


def _load_data(context: TrialContext, hyperparameters) -> Dataset:
    workload = context.resolve_workload()
    return load_shared(context.data, context.seed, flat=workload.flat_inputs, options=hyperparameters)


def _without_accuracy(metrics: dict[str, float], data: DataSource) -> dict[str, float]:
    """Synthetic data has random labels: its accuracy is never reported, not even as a metric."""
    return {k: v for k, v in metrics.items() if "accuracy" not in k} if data.synthetic else metrics


def _check_device(outcome: TrialOutcome, context: TrialContext, session, what: str) -> None:
    """Records where the framework put the work; a mislabelled timing is worse than none."""
    actual = session.actual_device()
    outcome.tags[schema.DEVICE_ACTUAL] = actual
    if not _matches(context.device, actual):
        raise DeviceMismatch(f"requested {context.device} but {what} on {actual}")


def _sampler(gpus: list[int]):
    return gpu_monitor.GpuSampler(gpus[0]) if gpus else contextlib.nullcontext()


def _train_one(outcome, entry, context: TrialContext, hyperparameters, repeat: int, gpus, import_s: float, start):
    """One configuration: setup, fit (epochs on a synchronised clock), evaluation."""
    from threadpoolctl import threadpool_limits

    clock = PhaseClock()
    with threadpool_limits(limits=context.cpus):
        with clock.phase("setup"):
            data = _load_data(context, hyperparameters)
            session = entry.open_session(hyperparameters, data, seed=context.seed + repeat)
            session.build()
        _check_device(outcome, context, session, f"{context.backend} placed the model")
        if hasattr(session, "compile"):  # a compiled loop: its program from the worker's cache
            with clock.phase("compile"):
                outcome.tags.update(session.compile())
            # After its own: compiling the others beside it starved it.
            ahead = compile_others_ahead(context, session, lambda: _other_programs(entry, context, data, session))
            outcome.metrics.update({schema.COMPILE_S: clock.phases["compile"], schema.PROGRAMS_AHEAD: ahead})
        clock.sync = session.sync
        sampler = _sampler(gpus)
        with sampler, clock.phase("fit"):  # sampler outside: its start is not training time
            fit_metrics = session.fit(clock)
        if gpus:
            outcome.metrics.update(sampler.metrics())
        with clock.phase("eval"):
            eval_metrics = session.evaluate()
    epochs = epoch_summary(clock.epochs)
    outcome.metrics.update(
        {
            schema.IMPORT_S: import_s,
            schema.SETUP_S: clock.phases["setup"],
            schema.FIT_S: clock.phases["fit"],
            # What fit() spends outside its epochs: input pipelines, callbacks, wrappers.
            schema.FIT_OUTSIDE_EPOCHS_S: clock.phases["fit"] - sum(clock.epochs),
            schema.EVAL_S: clock.phases["eval"],
            **epochs,
            schema.SAMPLES_PER_S: session.train_samples / epochs[schema.STEADY_EPOCH_S],
            schema.TRAIN_EPOCHS_S: sum(clock.epochs),
            **fit_metrics,
            **_without_accuracy(eval_metrics, context.data),
        }
    )
    outcome.epoch_times = list(clock.epochs)
    outcome.tags.update({"threads.omp": os.environ["OMP_NUM_THREADS"], "threads.blas": _blas_threads()})
    outcome.tags.update(session.facts())


# Compile caches whose search's other programs this worker has queued (a worker serves one search).
_QUEUED_AHEAD: set[str] = set()


def compile_others_ahead(context: TrialContext, session, others: Callable[[], Iterable]) -> int:
    """Queues the search's other programs this worker lacks for compiling in the background; returns how many.

    On a GPU only: XLA compiles on the host while the device trains, and a CPU trial's
    cores are its own (compiling beside it would slow the very epochs it times). Once per
    worker and search: the first trial queues them all. `others()` yields the sessions of
    the other programs; they compile from their shapes, without their data.
    """
    from gridbench.workloads.programs import PROGRAMS

    if context.device != "gpu" or context.precompiled or context.compile_cache_dir in _QUEUED_AHEAD:
        return 0
    if context.compile_cache_dir is not None:
        _QUEUED_AHEAD.add(context.compile_cache_dir)
    jobs = {other.program_key: other.compile_detached for other in others()}
    jobs.pop(session.program_key, None)
    return PROGRAMS.compile_ahead(jobs)


def _other_programs(entry, context: TrialContext, data: Dataset, session) -> Iterator:
    """A session of each of the search's programs, for compiling ahead (compiled loops on one device only)."""
    import keras

    if not hasattr(session, "compile_detached") or keras.distribution.distribution() is not None:
        return  # Keras fit, or data parallelism: each program is compiled by its first trial, then reused
    for configuration in context.programs:
        other = entry.open_session({**context.params, **configuration}, data, seed=context.seed)
        if hasattr(other, "compile_detached"):
            yield other


def _train_group(outcome, entry, context: TrialContext, hyperparameters, repeat: int, gpus, import_s: float, start):
    """Trains every value of the workload's inner axis in one trial, sharing what they share.

    The outcome holds one entry per value under "group". Each entry's metrics say
    what was its own (solve_s, eval_s) and what the group shared (setup_s,
    warmup_s, gram_s, ...; `shared_by` counts the configurations sharing them);
    fit_s, its training time, is its own solve plus its equal part of the shared
    training work, and trial_wall_s its equal part of the group's wall time.
    """
    from threadpoolctl import threadpool_limits

    clock = PhaseClock()
    with threadpool_limits(limits=context.cpus):
        with clock.phase("setup"):
            data = _load_data(context, hyperparameters)
            session = entry.open_session(hyperparameters, data, context.seed + repeat, context.device)
            warmup = session.build()
        _check_device(outcome, context, session, "the workload computed")
        clock.sync = session.sync
        sampler = _sampler(gpus)
        with sampler:
            results = session.fit_grid(context.inner_values, clock)
    group_wall = time.perf_counter() - start
    shared_by = len(results)
    shared = {schema.IMPORT_S: import_s, schema.SETUP_S: clock.phases["setup"], **warmup, **session.shared}
    shared_training = shared.get("gram_s", 0.0) + shared.get("factor_s", 0.0)
    if gpus:
        shared.update(sampler.metrics())
    tags = {**outcome.tags, "threads.blas": _blas_threads(), **session.facts()}
    outcome.group = [
        TrialOutcome(
            TrialStatus.FINISHED,
            outcome.started_at,
            result.pop("ended_at"),
            repeat,
            value=value,
            tags={**tags, schema.SHARED_BY: str(shared_by)},
            metrics={
                **shared,
                **_without_accuracy(result, context.data),
                schema.SHARED_BY: float(shared_by),
                schema.FIT_S: result["solve_s"] + shared_training / shared_by,
                schema.TRIAL_WALL_S: group_wall / shared_by,
                schema.GROUP_WALL_S: group_wall,
            },
        )
        for value, result in zip(context.inner_values, results)
    ]
