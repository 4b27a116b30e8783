"""One trial, as it runs inside a Ray worker: a workload trained on a device, timed.

The process is configured before the framework is imported (backend, visible
devices, thread counts from the CPUs Ray gave the trial), the device the framework
actually used is read back from it, and every phase is timed on a synchronised
clock. The trial returns a plain dict; it never writes to MLflow itself, so that
concurrent trials cannot race in the store.
"""

from __future__ import annotations

import os
import socket
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

from gridbench import datasets
from gridbench.timing import PhaseClock, epoch_summary
from gridbench.workloads import get_workload

REPEAT_KEY = "repeat"


@dataclass(frozen=True)
class TrialContext:
    """What every trial of a search shares; the grid point arrives separately."""

    workload: str
    params: Mapping[str, Any]  # fixed hyperparameters
    data: datasets.DataSource
    device: str  # "cpu" or "gpu": what was requested
    backend: str  # Keras backend: tensorflow, jax or torch
    cpus: int  # CPUs Ray reserved for each trial
    seed: int
    env: Mapping[str, str] = field(default_factory=dict)  # extra variables for the worker


class WorkloadSession(Protocol):
    """What a workload offers a trial; see gridbench.workloads.keras_mlp for one."""

    train_samples: int

    def build(self) -> None: ...
    def fit(self, clock: PhaseClock) -> dict[str, float]: ...
    def evaluate(self) -> dict[str, float]: ...
    def actual_device(self) -> str: ...
    def sync(self) -> None: ...


class DeviceMismatch(RuntimeError):
    """The framework placed the model somewhere other than the requested device."""


def configure_process(context: TrialContext) -> dict[str, str]:
    """Sets, before any framework import, what the framework reads at start-up.

    Ray sets OMP_NUM_THREADS=1 in its workers, and does not hide GPUs from a trial
    that asked for none, so both are set explicitly from the trial's resources.
    """
    threads = str(context.cpus)
    settings = {
        "KERAS_BACKEND": context.backend,
        "TF_CPP_MIN_LOG_LEVEL": "2",
        "OMP_NUM_THREADS": threads,
        "MKL_NUM_THREADS": threads,
        "OPENBLAS_NUM_THREADS": threads,
        "TF_NUM_INTRAOP_THREADS": threads,
        "TF_NUM_INTEROP_THREADS": threads,
        **context.env,
    }
    if context.device == "cpu":
        settings["CUDA_VISIBLE_DEVICES"] = ""
        settings["JAX_PLATFORMS"] = "cpu"
    keras = sys.modules.get("keras")
    if keras is not None and keras.backend.backend() != context.backend:
        raise RuntimeError(
            f"this worker already runs Keras on {keras.backend.backend()}; cannot switch to {context.backend}"
        )
    os.environ.update(settings)
    return settings


def _import_framework(context: TrialContext) -> float:
    """Imports Keras and its backend, limited to the trial's CPUs; returns the seconds it took.

    A reused worker has it imported already, and pays (almost) nothing.
    """
    start = time.perf_counter()
    import keras  # noqa: F401  (the backend is imported with it)

    if context.backend == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(context.cpus)
            tf.config.threading.set_inter_op_parallelism_threads(context.cpus)
        except RuntimeError:
            pass  # already initialised by an earlier trial in this worker; the facts below tell
    elif context.backend == "torch":
        import torch

        torch.set_num_threads(context.cpus)
    return time.perf_counter() - start


def _thread_facts(backend: str) -> dict[str, str]:
    from threadpoolctl import threadpool_info

    facts = {"threads.omp": os.environ.get("OMP_NUM_THREADS", "")}
    blas = [str(pool["num_threads"]) for pool in threadpool_info() if pool.get("user_api") == "blas"]
    facts["threads.blas"] = ",".join(blas) or "none"
    if backend == "tensorflow":
        import tensorflow as tf

        # 0 would mean "TensorFlow's default"; see _import_framework.
        facts["threads.tf_intra_op"] = str(tf.config.threading.get_intra_op_parallelism_threads())
        facts["threads.tf_inter_op"] = str(tf.config.threading.get_inter_op_parallelism_threads())
    elif backend == "torch":
        import torch

        facts["threads.torch"] = str(torch.get_num_threads())
    return facts


def _matches(requested: str, actual: str) -> bool:
    return actual.split(":")[0] == requested


def run_trial(config: Mapping[str, Any], context: TrialContext) -> dict[str, Any]:
    """Trains one grid point and returns its outcome; failures are returned, not raised."""
    started_at = time.time()
    start = time.perf_counter()
    repeat = int(config.get(REPEAT_KEY, 0))
    hyperparameters = {**context.params, **{k: v for k, v in config.items() if k != REPEAT_KEY}}
    outcome: dict[str, Any] = {
        "started_at": started_at,
        "repeat": repeat,
        "metrics": {},
        "tags": {"host": socket.gethostname(), "pid": str(os.getpid()), "device.requested": context.device},
    }
    try:
        configure_process(context)
        import_s = _import_framework(context)
        from threadpoolctl import threadpool_limits

        session_class = get_workload(context.workload, "trial").load_train()
        clock = PhaseClock()
        with threadpool_limits(limits=context.cpus):
            with clock.phase("setup"):
                data = datasets.load(context.data, seed=context.seed)
                session: WorkloadSession = session_class(hyperparameters, data, seed=context.seed + repeat)
                session.build()
            actual = session.actual_device()
            outcome["tags"]["device.actual"] = actual
            if not _matches(context.device, actual):
                raise DeviceMismatch(f"requested {context.device} but {context.backend} placed the model on {actual}")
            clock.sync = session.sync
            with clock.phase("fit"):
                fit_metrics = session.fit(clock)
            with clock.phase("eval"):
                eval_metrics = session.evaluate()
        epochs = epoch_summary(clock.epochs)
        outcome["metrics"].update(
            {
                "import_s": import_s,
                "setup_s": clock.phases["setup"],
                "fit_s": clock.phases["fit"],
                # What fit() spends outside its epochs: input pipelines, callbacks, wrappers.
                "fit_outside_epochs_s": clock.phases["fit"] - sum(clock.epochs),
                "eval_s": clock.phases["eval"],
                **epochs,
                "samples_per_s": session.train_samples / epochs["steady_epoch_s"],
                **fit_metrics,
                **eval_metrics,
            }
        )
        outcome["epoch_times"] = list(clock.epochs)
        outcome["tags"].update(_thread_facts(context.backend))
        outcome["tags"]["backend"] = sys.modules["keras"].backend.backend()
        outcome["status"] = "FINISHED"
    except Exception as err:
        outcome["status"] = "FAILED"
        outcome["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:500]
        outcome["traceback"] = traceback.format_exc()
    outcome["ended_at"] = time.time()
    outcome["metrics"]["trial_wall_s"] = time.perf_counter() - start
    return outcome
