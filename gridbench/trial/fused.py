"""A fused group in a Ray worker: several configurations trained as one vectorised program, timed as one.

The group's phases and epochs are measured once, on a synchronised clock (the
group's state is what `sync` waits for). Each member then gets its own outcome:
its own accuracy and loss, and timings that say what was shared: `fused_with` (the
group's size), the group's own measurements (group_warmup_epoch_s,
group_steady_epoch_s, group_fit_s, group_wall_s), and the member's equal share of
each (warmup_epoch_s, steady_epoch_s, fit_s, trial_wall_s, ... = the group's / N),
so that the search's sums and a comparison with unfused trials count every
second once. The warm-up epoch (compilation) stays apart from the steady state.
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterator, Mapping, Sequence

from gridbench import compile_cache
from gridbench.tracking import schema
from gridbench.tracking.schema import TrialStatus
from gridbench.trial import steps
from gridbench.trial.context import TrialContext
from gridbench.trial.outcome import TrialOutcome
from gridbench.trial.steps import (
    blas_threads,
    check_device,
    compile_others_ahead,
    load_data,
    program_phases,
    without_accuracy,
)
from gridbench.trial.timing import PhaseClock, epoch_summary


def train_fused(
    outcome: TrialOutcome,
    entry,
    context: TrialContext,
    hyperparameters: Mapping[str, Any],
    repeat: int,
    gpus: list[int],
    import_s: float,
    start: float,
    *,
    members: Sequence[tuple[Mapping[str, Any], int]],
) -> None:
    """Trains `members` ((grid point, repeat) each) as one group; their outcomes go to outcome.group."""
    from threadpoolctl import threadpool_limits

    configs = [{**hyperparameters, **config} for config, _ in members]
    seeds = [context.seed + member_repeat for _, member_repeat in members]  # as each would have alone
    clock = PhaseClock()
    with threadpool_limits(limits=context.cpus):
        with clock.phase("setup"):
            data = load_data(context, configs[0])
            session = entry.open_fused_session(configs, data, seeds)
            session.workload = context.workload
            session.build()
        check_device(outcome, context, session, f"{context.backend} placed the fused group")
        program_clocks = compile_cache.phase_totals()
        with clock.phase("compile"):
            outcome.tags.update(session.compile())
        phases = program_phases(compile_cache.phases_since(program_clocks))
        ahead = compile_others_ahead(  # after its own, as trial.trial_runner does
            context, session, lambda: _other_groups(entry, context, hyperparameters, data)
        )
        clock.sync = session.sync
        sampler = steps.sampler(gpus)
        with sampler, clock.phase("fit"):  # sampler outside: its start is not training time
            fits = session.fit(clock)
        gpu_metrics = sampler.metrics() if gpus else {}
        with clock.phase("eval"):
            evaluations = session.evaluate()
    group_wall = time.perf_counter() - start
    size = len(members)
    shares = [seconds / size for seconds in clock.epochs]
    timings = _member_timings(clock, size, group_wall, import_s, ahead, session.train_samples, gpu_metrics)
    timings.update({metric: seconds / size for metric, seconds in phases.items()})  # compile_s's parts, shared too
    tags = {
        **outcome.tags,
        "threads.omp": os.environ["OMP_NUM_THREADS"],
        "threads.blas": blas_threads(),
        **session.facts(),
        schema.FUSED_WITH: str(size),
    }
    ended_at = time.time()
    outcome.group = [
        TrialOutcome(
            TrialStatus.FINISHED,
            outcome.started_at,
            ended_at,
            member_repeat,
            metrics={**timings, **without_accuracy({**fit, **evaluation}, context.data)},
            tags=dict(tags),
            epoch_times=list(shares),
            value=index,
        )
        for index, ((_, member_repeat), fit, evaluation) in enumerate(zip(members, fits, evaluations))
    ]


def _member_timings(
    clock: PhaseClock, size: int, group_wall: float, import_s: float, ahead: int, train_samples: int, gpu_metrics
) -> dict[str, float]:
    """Each member's timings: its equal share of the group's, and the group's own beside them."""
    shares = [seconds / size for seconds in clock.epochs]
    group = epoch_summary(clock.epochs)
    return {
        schema.IMPORT_S: import_s,  # the worker's, not the group's: 0 once reused
        schema.SETUP_S: clock.phases["setup"] / size,
        schema.COMPILE_S: clock.phases["compile"] / size,
        schema.PROGRAMS_AHEAD: float(ahead),
        schema.FIT_S: clock.phases["fit"] / size,
        schema.FIT_OUTSIDE_EPOCHS_S: (clock.phases["fit"] - sum(clock.epochs)) / size,
        schema.EVAL_S: clock.phases["eval"] / size,
        **epoch_summary(shares),
        schema.TRAIN_EPOCHS_S: sum(shares),  # the group's epochs, counted once over its members
        # Each member's samples in its share of the time: the group's throughput.
        schema.SAMPLES_PER_S: train_samples * size / group[schema.STEADY_EPOCH_S],
        schema.FUSED_WITH: float(size),
        schema.GROUP_WARMUP_EPOCH_S: group[schema.WARMUP_EPOCH_S],
        schema.GROUP_STEADY_EPOCH_S: group[schema.STEADY_EPOCH_S],
        schema.GROUP_FIT_S: clock.phases["fit"],
        schema.GROUP_WALL_S: group_wall,
        schema.TRIAL_WALL_S: group_wall / size,
        **gpu_metrics,
    }


def _other_groups(entry, context: TrialContext, hyperparameters, data) -> Iterator:
    """A session of each of the search's fused groups, for compiling ahead."""
    for members in context.fused_groups:
        other = open_group(entry, context, hyperparameters, members, data)
        if other is not None:
            yield other


def open_group(entry, context: TrialContext, hyperparameters, members, data):
    """The session of one fused group, for compiling its program; None where this data cannot open it."""
    configs = [{**hyperparameters, **config} for config, _ in members]
    try:
        session = entry.open_fused_session(configs, data, [context.seed + repeat for _, repeat in members])
    except ValueError:  # a group this worker cannot open from its data (another train_size): its trial compiles it
        return None
    session.workload = context.workload
    return session
