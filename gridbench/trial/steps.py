"""The steps every kind of trial takes (one configuration, an inner axis's group, a fused group).

Its data, where the framework put the work, the GPU's sampler, the BLAS threads, and
queuing the search's other programs for compiling ahead.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterable, Iterator

from gridbench import compile_cache
from gridbench.datasets import Dataset, DataSource
from gridbench.datasets.trial_data import load_shared
from gridbench.tracking import schema
from gridbench.trial import gpu_monitor
from gridbench.trial.context import DeviceMismatch, TrialContext
from gridbench.trial.outcome import TrialOutcome

# Compile caches whose search's other programs this worker has queued (a worker serves one search).
_QUEUED_AHEAD: set[str] = set()


class OnItsThread:
    """Work started on a thread of its own, by a worker's first trial or its setup hook, that the first trial later
    waits for: once per worker.

    `took` is what the work took on its thread, set where it ended without raising; the first `wait` reports it
    with what the trial still waited, and every later one nothing.
    """

    def __init__(self) -> None:
        self.thread: threading.Thread | None = None
        self.took: float | None = None
        self.reported = False

    def start(self, name: str, work: Callable[[], object]) -> None:
        def run() -> None:
            began = time.perf_counter()
            try:
                work()
            except Exception:  # noqa: BLE001 - the trial meets the same failure on its own, and names it
                return
            self.took = time.perf_counter() - began

        self.thread = threading.Thread(target=run, name=name, daemon=True)
        self.thread.start()

    def wait(self) -> tuple[float, float] | None:
        """(seconds on its thread, seconds the trial waited) for the first trial to wait; None after that, or where
        the work never started or failed."""
        if self.thread is None or self.reported:
            return None
        began = time.perf_counter()
        self.thread.join()
        self.reported = True
        return None if self.took is None else (self.took, time.perf_counter() - began)


_BACKEND = OnItsThread()  # this worker's early start of JAX's GPU backend
_DATA = OnItsThread()  # its first trial's data, read from the trial's start or from Ray's setup hook


def start_jax_backend_early(context: TrialContext) -> None:
    """Starts JAX's GPU backend on a thread of its own, while the worker imports Keras (once per worker).

    A new worker otherwise imports JAX and Keras, then starts the backend, one after the other: on an H100,
    fresh processes were ready 4.48 s after their start with the two at once, against 4.97 s one after the
    other (medians of 3, benchmarks/worker_start.py). The trial's first use of the device waits for it (JAX
    starts its backends under a lock), so nothing timed starts before the device is up.
    """
    if context.device != "gpu" or context.backend != "jax" or _BACKEND.thread is not None:
        return  # a worker that started it in Ray's setup hook (start_jax_backend_ahead) has it already
    _BACKEND.start("gridbench-jax-backend", lambda: _start_jax_backend(context.compile_cache_dir))


def _start_jax_backend(cache_dir: str | None = None) -> None:
    """Starts the device; then, given the worker's compile cache, cuBLAS (start_gemm_library).

    JAX is pointed at the cache first, so that later workers read the product the first one compiled; the trial's setup
    points it at the same directory (its context's) while this may still run, which changes nothing.
    """
    try:
        import jax

        jax.devices()
    except Exception:  # noqa: BLE001 - timed all the same: the trial meets the failure on its first use
        return
    if cache_dir:
        compile_cache.use(cache_dir)
        with contextlib.suppress(Exception):  # the first evaluation then starts cuBLAS itself, as before
            start_gemm_library()


def start_gemm_library() -> None:
    """Runs one small product compiled as a trial's evaluation is (cuBLAS', compile_cache.EVALUATION_GPU_OPTIONS).

    A worker's first evaluation was 0.103-0.106 s, against 0.015-0.017 s for the same evaluation run again and
    0.054-0.055 s after this product, in fresh processes started as workers are on an H100 (benchmarks/first_trial.py;
    around-training.md, "twenty-fourth"): we take what the product removes to be cuBLAS' start. It runs beside the
    worker's imports, on the device's thread, which the imports outlasted in the headline's searches.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    a = np.ones((128, 128), np.float32)  # a host array: no program of its own to compile
    product = jax.jit(jnp.matmul).lower(a, a).compile(dict(compile_cache.EVALUATION_GPU_OPTIONS))
    jax.block_until_ready(product(a, a))


def start_jax_backend_ahead() -> None:
    """Starts JAX's GPU backend on a thread from Ray's setup hook, before the worker has a trial (once per worker).

    Only for a worker that sees one GPU, which is then the GPU Ray hands its trials (gridbench.trial.prestart); the
    trial's own early start then finds it started. The hook knows no compile cache, so cuBLAS is left to the first
    evaluation there.
    """
    if _BACKEND.thread is None:
        _BACKEND.start("gridbench-jax-backend", _start_jax_backend)


def backend_started_ahead() -> float | None:
    """Waits for start_jax_backend_ahead's start, in the hook: its seconds on its thread (None where it failed).

    The start is then reported by the hook's record (worker.device_start_ahead_s), not by the first trial.
    """
    waited = _BACKEND.wait()
    return waited[0] if waited else None


def backend_started() -> dict[str, float]:
    """Waits for the backend's start begun by start_jax_backend_early; its seconds, for the trial that waited.

    Only the worker's first trial reports them: `device_start_s`, what the start took on its thread (beside the
    worker's imports), and `device_wait_s`, what the trial then still waited for it. The trial's first use of the
    device would wait for it anyway; waiting here keeps that wait out of its setup.
    """
    waited = _BACKEND.wait()
    return {schema.DEVICE_START_S: waited[0], schema.DEVICE_WAIT_S: waited[1]} if waited else {}


def blas_threads() -> str:
    from threadpoolctl import threadpool_info

    return ",".join(str(pool["num_threads"]) for pool in threadpool_info() if pool.get("user_api") == "blas") or "none"


def _matches(requested: str, actual: str) -> bool:
    return actual.split(":")[0] == requested


def load_data(context: TrialContext, hyperparameters) -> Dataset:
    workload = context.resolve_workload()
    return load_shared(context.data, context.seed, flat=workload.flat_inputs, options=hyperparameters)


# Data whose reading imports nothing: read beside Keras' import, which hides scikit-learn meanwhile (keras_import).
EARLY_READ = ("mnist", "cifar10")


def start_data_read(context: TrialContext, hyperparameters) -> None:
    """Starts reading the trial's data on a thread, beside the worker's imports and its device's start.

    A worker's first trial only: the worker keeps its data (load_shared), and its later trials find them. Only data
    whose reading imports nothing (EARLY_READ, synthetic data): the others are read in the setup, as before. A
    read that fails reports nothing: the setup reads them again, and fails there as it would have.
    """
    if _DATA.thread is not None or not (context.data.synthetic or file_read_early(context.data)):
        return
    _DATA.start("gridbench-data-read", lambda: load_data(context, hyperparameters))


def file_read_early(source: DataSource) -> bool:
    """Whether these data are a file read on a thread before the trial's setup, from its start or from the worker's
    setup hook: one whose reading imports nothing and no hyperparameter shapes (EARLY_READ)."""
    return source.user is None and not source.synthetic and source.name in EARLY_READ


def start_data_read_ahead(source: DataSource, seed: int, flat: bool) -> bool:
    """Starts reading the search's data on a thread from Ray's setup hook, before the worker has a trial
    (gridbench.trial.prestart); True: started.

    The worker's first trial then starts no read of its own (start_data_read): it waits for this one and reports it
    as data_read_s and data_wait_s. Read with no hyperparameters: none shapes these files' data, and load_shared
    keys them without any.
    """
    if _DATA.thread is not None or not file_read_early(source):
        return False
    _DATA.start("gridbench-data-read", lambda: load_shared(source, seed, flat=flat))
    return True


def data_read() -> dict[str, float]:
    """Waits for the read start_data_read or start_data_read_ahead began; for the trial that waited, what the read
    took on its thread (`data_read_s`) and what the trial still waited for it (`data_wait_s`), before its setup. Once
    per worker."""
    waited = _DATA.wait()
    return {schema.DATA_READ_S: waited[0], schema.DATA_WAIT_S: waited[1]} if waited else {}


def without_accuracy(metrics: dict[str, float], data: DataSource) -> dict[str, float]:
    """Synthetic data has random labels: its accuracy is never reported, not even as a metric."""
    return {k: v for k, v in metrics.items() if "accuracy" not in k} if data.synthetic else metrics


def check_device(outcome: TrialOutcome, context: TrialContext, session, what: str) -> None:
    """Records where the framework put the work; a mislabelled timing is worse than none."""
    actual = session.actual_device()
    outcome.tags[schema.DEVICE_ACTUAL] = actual
    if not _matches(context.device, actual):
        raise DeviceMismatch(f"requested {context.device} but {what} on {actual}")


def program_phases(phases: dict[str, float]) -> dict[str, float]:
    """The compile phase's split by JAX's clocks and gridbench's (compile_cache.phases_since), where this trial's
    thread got its program itself (else none)."""
    if not any(phases.values()):
        return {}
    return {schema.PROGRAM_PHASE_METRICS[phase]: seconds for phase, seconds in phases.items()}


def sampler(gpus: list[int]):
    return gpu_monitor.GpuSampler(gpus[0]) if gpus else contextlib.nullcontext()


def compile_others_ahead(context: TrialContext, session, others: Callable[[], Iterable]) -> int:
    """Queues the search's other programs this worker lacks for compiling in the background; returns how many.

    On a GPU only: XLA compiles on the host while the device trains, and a CPU trial's
    cores are its own (compiling beside it would slow the very epochs it times). Once per
    worker and search: the first trial queues them all. `others()` yields the sessions of
    the other programs; they compile from their shapes, without their data. Where the cache
    holds them all, "compiling" is reading each saved program: no later trial reads its own.
    """
    from gridbench.workloads.programs import PROGRAMS

    if context.device != "gpu" or context.precompiled or context.compile_cache_dir in _QUEUED_AHEAD:
        return 0
    if context.compile_cache_dir is not None:
        _QUEUED_AHEAD.add(context.compile_cache_dir)
    jobs = {other.program_key: other.compile_detached for other in others()}
    jobs.pop(session.program_key, None)
    return PROGRAMS.compile_ahead(jobs)


def other_programs(entry, context: TrialContext, data: Dataset, session) -> Iterator:
    """A session of each of the search's programs, for compiling ahead (compiled loops on one device only)."""
    import keras

    if not hasattr(session, "compile_detached") or keras.distribution.distribution() is not None:
        return  # Keras fit, or data parallelism: each program is compiled by its first trial, then reused
    for configuration in context.programs:
        other = entry.open_session({**context.params, **configuration}, data, seed=context.seed)
        if hasattr(other, "compile_detached"):
            yield other
