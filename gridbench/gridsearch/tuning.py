"""Driving Ray Tune: the grid as Tune's parameter space (or its points in a given order), and its trainable.

SearchPlan -> TrialContext (what every trial shares) -> tune.Tuner -> one _trainable call per trial
"""

from __future__ import annotations

import itertools
import os
import time
from typing import Any, Callable, Mapping

from gridbench import collector, compile_cache
from gridbench.gridsearch import plain_workers
from gridbench.gridsearch.options import SearchPlan
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.trial import FUSED_GROUP_KEY, REPEAT_KEY, TrialContext
from gridbench.trial.outcome import TrialOutcome
from gridbench.trial.trial_runner import TRIAL_ID_ENV
from gridbench.workloads import RUNTIME_HYPERPARAMETERS, program_key

TrialRunner = Callable[[Mapping[str, Any], TrialContext], TrialOutcome]


def _trainable(config: dict, context: TrialContext, runner: TrialRunner) -> None:
    """Ray Tune's function trainable: run the trial, report its outcome once (as a dict: Ray carries plain data)."""
    import ray
    from ray import tune

    os.environ[TRIAL_ID_ENV] = tune.get_context().get_trial_id()  # for the trial timeout's clock (run.note_started)
    collector.pause_for_startup()  # Ray's worker process, ours: its framework is imported without the collector
    try:
        outcome = runner(config, context)  # run_trial resumes it once the framework is imported
    finally:
        collector.resume_after_startup()  # a runner that imported nothing, or failed before
    outcome.tags[schema.RAY_NODE_ID] = ray.get_runtime_context().get_node_id()
    tune.report({"gridbench": outcome.to_dict()})


def trial_context(plan: SearchPlan, storage: str, precompiled: bool = False) -> TrialContext:
    """What every trial of the search shares; `storage` is the search's Tune directory (its compile cache is inside)."""
    spec, options = plan.spec, plan.options
    return TrialContext(
        workload=spec.model,
        user_workload=spec.workload if spec.user_model else None,
        params=dict(spec.params),
        data=plan.data,
        device=options.device,
        backend=plan.backend,
        cpus=plan.cpus_per_trial,
        seed=spec.seed,
        gpus_per_trial=plan.gpus_per_trial,
        inner_axis=spec.workload.inner_axis,
        inner_values=plan.inner_values,
        compile_cache_dir=compile_cache.directory(options.compile_cache, storage),
        programs=program_representatives(spec),
        fused_groups=plan.fused_groups,
        precompiled=precompiled,
        started_dir=os.path.join(storage, "started") if plan.trial_timeout_s else None,
    )


def fit(
    plan: SearchPlan,
    runner: TrialRunner,
    callback,
    concurrency: int,
    context: TrialContext,
    storage: str,
    resume=None,
    plain_actors: bool = False,
) -> float:
    """Runs every trial through Ray Tune (a resumed search: those not finished); returns the makespan in seconds.

    `plain_actors`: Tune's trial actors go without a runtime_env of their own (gridbench.gridsearch.plain_workers,
    as the search decided it: RaySession.actors_plain)."""
    from ray import tune

    spec = plan.spec
    param_space = {
        axis: tune.grid_search(list(values))
        for axis, values in grid_order(spec)
        if axis != spec.workload.inner_axis  # trained inside each trial
    }
    param_space[REPEAT_KEY] = tune.grid_search(list(range(spec.repeats)))
    if plan.fused_groups:  # one trial per group: its members' configurations and repeats travel in the context
        param_space = {FUSED_GROUP_KEY: tune.grid_search(list(range(len(plan.fused_groups))))}
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, context=context, runner=runner),
        {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial},
    )
    search = {}
    if resume is not None or plan.trial_order:
        points = resume.tune_points(plan) if resume is not None else [dict(p) for p in plan.trial_order]
        from ray.tune.search.basic_variant import BasicVariantGenerator

        # Only these grid points, in this order: each one overrides every axis of the grid, one Tune trial each.
        search = {"search_alg": BasicVariantGenerator(points_to_evaluate=points), "num_samples": len(points)}
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True, **search),
        run_config=tune.RunConfig(
            name=f"{spec.name}-{int(time.time())}",
            storage_path=storage,
            callbacks=[callback],
            verbose=0,
            # --retries: a trial whose worker died runs again; each attempt is recorded (RecordingCallback).
            failure_config=tune.FailureConfig(max_failures=plan.options.retries),
        ),
    )
    with plain_workers.trial_actors_plain(plain_actors):
        start = time.perf_counter()
        tuner.fit()
        makespan = time.perf_counter() - start
    collector.resume_after_startup()  # where no trial started, the recording callback did not (gridbench.collector)
    return makespan


def grid_order(spec: ExperimentSpec) -> list[tuple[str, tuple]]:
    """The grid's axes in the order Tune enumerates them: the first varies fastest.

    Axes that change the program come first, the runtime ones (learning rate, dropout
    rate) after them, so that the first trials cover the distinct programs and the
    later ones find theirs compiled.
    """
    return sorted(spec.grid.items(), key=lambda item: (item[0] in RUNTIME_HYPERPARAMETERS, item[0]))


def program_representatives(spec: ExperimentSpec) -> tuple[dict[str, Any], ...]:
    """One grid point per distinct program of the search, in the grid's order (processes compile them ahead in
    it; a search whose trials start in another order, SearchPlan.trial_order, may wait for a program compiled
    last)."""
    axes = [(axis, values) for axis, values in grid_order(spec) if axis != spec.workload.inner_axis]
    seen, representatives = set(), []
    # Tune varies the first axis fastest: itertools.product varies the last, so reverse both ways.
    for point in itertools.product(*(values for _, values in reversed(axes))):
        configuration = dict(zip((axis for axis, _ in reversed(axes)), point))
        key = program_key({**spec.params, **configuration})
        if key not in seen:
            seen.add(key)
            representatives.append(configuration)
    return tuple(representatives)
