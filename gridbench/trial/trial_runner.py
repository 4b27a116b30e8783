"""One trial, as it runs inside a Ray worker: a workload trained on a device, timed.

The process is configured before the framework is imported (backend, visible
devices, thread counts from the CPUs Ray gave the trial), the device the framework
actually used is read back from it, and every phase is timed on a synchronised
clock. The trial returns a TrialOutcome; it never writes to MLflow itself, so that
concurrent trials cannot race in the store.
"""

from __future__ import annotations

import functools
import os
import socket
import time
import traceback
from typing import Any, Mapping

from gridbench import collector, compile_cache
from gridbench.tracking import schema
from gridbench.tracking.schema import TrialStatus
from gridbench.trial import failure, gpu_monitor, keras_import, prestart, steps
from gridbench.trial.context import FUSED_GROUP_KEY, REPEAT_KEY, TrialContext, WorkloadEntry, configure_process
from gridbench.trial.fused import train_fused
from gridbench.trial.outcome import TrialOutcome
from gridbench.trial.steps import (
    blas_threads,
    check_device,
    compile_others_ahead,
    load_data,
    other_programs,
    program_phases,
    without_accuracy,
)
from gridbench.trial.timing import PhaseClock, epoch_summary


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
    gpus: list[int] = []
    ahead_tags, ahead_metrics = prestart.ahead_of_trial()  # the worker's imports in Ray's setup hook, if any
    outcome.tags.update(ahead_tags)
    try:
        configure_process(context)
        steps.start_jax_backend_early(context)
        train, data_options = _training(context, config, hyperparameters)
        steps.start_data_read(context, data_options)  # beside the imports and the device's start
        gpus = gpu_monitor.assigned_gpu_indices() if context.device == "gpu" else []
        if gpus:
            outcome.tags.update({schema.GPU_ASSIGNED: ",".join(map(str, gpus)), **gpu_monitor.describe(gpus[0])})
        imported = time.perf_counter()
        outcome.metrics[schema.PROCESS_SETUP_S] = imported - start  # NVML's start in a worker's first GPU trial
        workload = context.resolve_workload()
        keras_import.import_for(workload)
        entry: WorkloadEntry = workload.load_train()
        collector.resume_after_startup()  # paused by the trainable while the framework was imported
        entry.prepare(context)
        import_s = time.perf_counter() - imported  # about 0 in a reused worker
        note_started(context)
        # A worker's first trial waits for its data and its device, both started on threads of their own.
        ahead_metrics = {**ahead_metrics, **steps.data_read(), **steps.backend_started()}
        train(outcome, entry, context, hyperparameters, repeat, gpus, import_s, start)
    except Exception as err:
        outcome.status = TrialStatus.FAILED
        outcome.error = f"{type(err).__name__}: {err}".splitlines()[0][:500]
        outcome.traceback = traceback.format_exc()
        held = gpu_monitor.memory_held(gpus[0]) if gpus else None
        cause = failure.of_exception(err, held)
        outcome.tags.update({schema.FAILURE_KIND: cause.kind, schema.FAILURE_MESSAGE: cause.message})
    outcome.ended_at = time.time()
    outcome.metrics[schema.TRIAL_WALL_S] = time.perf_counter() - start
    for recorded in outcome.group or [outcome]:  # a group's members each carry them: the search counts a worker once
        recorded.metrics.update(ahead_metrics)
    return outcome


def _training(context: TrialContext, config: Mapping[str, Any], hyperparameters: Mapping[str, Any]):
    """The trial's training step, and the options its data are read with (a fused group's: its first member's)."""
    if context.fused_groups:
        members = context.fused_groups[int(config[FUSED_GROUP_KEY])]
        return functools.partial(train_fused, members=members), {**hyperparameters, **members[0][0]}
    return (_train_group if context.inner_axis else _train_one), hyperparameters


TRIAL_ID_ENV = "GRIDBENCH_TRIAL_ID"  # the Ray trial this worker runs now (set by the trainable)


def note_started(context: TrialContext) -> None:
    """Tells the driver's trial timeout that the trial's own work begins: its worker started, its framework imported."""
    trial_id = os.environ.get(TRIAL_ID_ENV)
    if not context.started_dir or not trial_id:
        return
    try:
        os.makedirs(context.started_dir, exist_ok=True)
        with open(os.path.join(context.started_dir, trial_id), "w") as marker:
            marker.write(repr(time.time()))
    except OSError:  # the driver's clock then starts at the worker's start instead
        pass


def _train_one(outcome, entry, context: TrialContext, hyperparameters, repeat: int, gpus, import_s: float, start):
    """One configuration: setup, fit (epochs on a synchronised clock), evaluation."""
    from threadpoolctl import threadpool_limits

    clock = PhaseClock()
    with threadpool_limits(limits=context.cpus):
        with clock.phase("setup"):
            data = load_data(context, hyperparameters)
            session = entry.open_session(hyperparameters, data, seed=context.seed + repeat)
            session.build()
        check_device(outcome, context, session, f"{context.backend} placed the model")
        if hasattr(session, "compile"):  # a compiled loop: its program from the worker's cache
            jax_clocks = compile_cache.phase_totals()
            with clock.phase("compile"):
                outcome.tags.update(session.compile())
            outcome.metrics.update(program_phases(compile_cache.phases_since(jax_clocks)))
            # After its own: compiling the others beside it starved it.
            ahead = compile_others_ahead(context, session, lambda: other_programs(entry, context, data, session))
            outcome.metrics.update({schema.COMPILE_S: clock.phases["compile"], schema.PROGRAMS_AHEAD: ahead})
        clock.sync = session.sync
        sampler = steps.sampler(gpus)
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
            **without_accuracy(eval_metrics, context.data),
        }
    )
    outcome.epoch_times = list(clock.epochs)
    outcome.tags.update({"threads.omp": os.environ["OMP_NUM_THREADS"], "threads.blas": blas_threads()})
    outcome.tags.update(session.facts())


def _train_group(outcome, entry, context: TrialContext, hyperparameters, repeat: int, gpus, import_s: float, start):
    """Trains every value of the workload's inner axis in one trial, sharing what they share.

    The outcome holds one entry per value under "group". Each entry's metrics say
    what was its own (solve_s, eval_s) and what the group shared (setup_s,
    warmup_s, gram_s, ...; `shared_by` counts the configurations sharing them);
    fit_s, its training time, is its own solve plus its equal part of the shared
    training work; trial_wall_s is its own solve and evaluation plus an equal part of
    the rest of the group's wall time (what they shared). An equal part of the whole
    wall time read below fit_s where one solve took longer than another's.
    """
    from threadpoolctl import threadpool_limits

    clock = PhaseClock()
    with threadpool_limits(limits=context.cpus):
        with clock.phase("setup"):
            data = load_data(context, hyperparameters)
            session = entry.open_session(hyperparameters, data, context.seed + repeat, context.device)
            warmup = session.build()
        check_device(outcome, context, session, "the workload computed")
        clock.sync = session.sync
        sampler = steps.sampler(gpus)
        with sampler:
            results = session.fit_grid(context.inner_values, clock)
    group_wall = time.perf_counter() - start
    shared_by = len(results)
    shared = {schema.IMPORT_S: import_s, schema.SETUP_S: clock.phases["setup"], **warmup, **session.shared}
    shared_training = shared.get("gram_s", 0.0) + shared.get("factor_s", 0.0)
    # The group's wall time less every configuration's own solve and evaluation: what they shared.
    shared_wall = max(0.0, group_wall - sum(r["solve_s"] + r["eval_s"] for r in results)) / shared_by
    if gpus:
        shared.update(sampler.metrics())
    tags = {**outcome.tags, "threads.blas": blas_threads(), **session.facts()}
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
                **without_accuracy(result, context.data),
                schema.SHARED_BY: float(shared_by),
                schema.FIT_S: result["solve_s"] + shared_training / shared_by,
                schema.TRIAL_WALL_S: result["solve_s"] + result["eval_s"] + shared_wall,
                schema.GROUP_WALL_S: group_wall,
            },
        )
        for value, result in zip(context.inner_values, results)
    ]
