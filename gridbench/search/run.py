"""Running a search: an experiment's grid as Ray Tune trials, each recorded in MLflow as it ends.

    SearchPlan -> Ray Tune trials (gridbench.trial, in workers) -> TrialRecords -> MLflow -> SearchResult

The driver is the only process that writes to MLflow: a Tune callback turns each
finished or failed trial into a TrialRecord and hands it to the Recorder.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

from gridbench import environment
from gridbench.errors import UserError
from gridbench.search import placement
from gridbench.search.plan import SearchPlan
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder, Recorder
from gridbench.trial import FUSED_GROUP_KEY, REPEAT_KEY, TrialContext, run_trial
from gridbench.trial.outcome import TrialOutcome

TrialRunner = Callable[[Mapping[str, Any], TrialContext], TrialOutcome]


class SearchObserver(Protocol):
    """Hears of a search's progress, in the driver: a progress bar, a test."""

    def start(self, total: int) -> None: ...
    def trial_started(self, config: Mapping[str, Any]) -> None: ...
    def trial_ended(self, record: TrialRecord) -> None: ...
    def stop(self) -> None: ...


@dataclass(frozen=True)
class SearchResult:
    plan: SearchPlan
    parent_run_id: str
    experiment_name: str
    trials: tuple[TrialRecord, ...]
    summary: SearchSummary


def _start_ray(plan: SearchPlan) -> None:
    import ray

    quiet = {"log_to_driver": False, "logging_level": "ERROR", "configure_logging": True}
    if plan.options.address:
        try:
            # The cluster's nodes bring their own resources; they must reach the same data path.
            ray.init(address=plan.options.address, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as err:
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(
                f"--address {plan.options.address}: cannot join the Ray cluster ({first}); "
                f"start it with `ray start --head` or fix --address"
            ) from None
        return
    ray.init(
        # Its own Ray, even where another was started on this machine: ray.init() alone would join that one.
        address="local",
        num_cpus=plan.cpus,  # --cpus N: Ray hands out N cores
        num_gpus=plan.gpus,  # --gpus N: Ray hands out GPUs 0..N-1 only; none to a CPU search
        include_dashboard=False,
        **quiet,
    )


def _trainable(config: dict, context: TrialContext, runner: TrialRunner) -> None:
    """Ray Tune's function trainable: run the trial, report its outcome once (as a dict: Ray carries plain data)."""
    import ray
    from ray import tune

    outcome = runner(config, context)
    outcome.tags[schema.RAY_NODE_ID] = ray.get_runtime_context().get_node_id()
    tune.report({"gridbench": outcome.to_dict()})


def _quiet_ray() -> None:
    # Tune's own CSV/JSON/TensorBoard loggers and console output are replaced by
    # MLflow and gridbench's progress bar; usage-stats prompts need no network here.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Ctrl-C should stop the search at once (finished trials are already in MLflow),
    # not be swallowed by Tune's own graceful-stop handler.
    os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_search(
    plan: SearchPlan,
    observer: SearchObserver | None = None,
    runner: TrialRunner = run_trial,
    requested_at: float | None = None,
    extra_tags: Mapping[str, str] | None = None,
    open_recorder: Callable[[str, str], Recorder] = MlflowRecorder,
) -> SearchResult:
    """Runs the planned search; `observer` (gridbench.search.progress.SearchProgress) hears of each trial.

    `requested_at` (Unix time) is when the user asked for this search, for its time
    to first trial; by default the command's start (this process's creation).
    `open_recorder(tracking_uri, spec_name)` opens where the records go (MLflow).
    """
    _quiet_ray()
    import ray

    env = environment.collect()
    recorder, ray_start_s, resources = _start(plan, open_recorder)
    storage = tempfile.mkdtemp(prefix="gridbench-ray-")
    status, error, summary = SearchStatus.FAILED, None, None
    try:
        concurrency = plan.concurrency_on(resources.get("CPU", 0), resources.get("GPU", 0))
        tags = search_tags(plan, env, resources, len([n for n in ray.nodes() if n.get("Alive")]), extra_tags)
        recorder.start(
            run_name=search_run_name(plan, resources),
            params=search_params(plan.spec),
            tags=tags,
            documents={"spec.json": plan.spec.to_dict(), "environment.json": env},
        )
        callback = _recording_callback(plan, recorder, tags, observer)
        if observer is not None:
            observer.start(plan.trials_total)
        makespan = _fit(plan, runner, callback, concurrency, storage)
        trials = tuple(callback.records)
        process_start = requested_at if requested_at is not None else _process_start_time()
        summary = summarise(plan, trials, concurrency, makespan, ray_start_s, process_start)
        status = SearchStatus.FINISHED
        if len(trials) < plan.trials_total:
            status, error = SearchStatus.KILLED, f"the search stopped after {len(trials)} of {plan.trials_total} trials"
        return SearchResult(plan, recorder.parent_run_id, recorder.experiment_name, trials, summary)
    except KeyboardInterrupt:
        status, error = SearchStatus.KILLED, "interrupted"
        raise
    except BaseException as err:
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        if observer is not None:
            observer.stop()
        recorder.finish(summary, status, error)
        ray.shutdown()
        shutil.rmtree(storage, ignore_errors=True)


def _start(plan: SearchPlan, open_recorder) -> tuple[Recorder, float, dict[str, float]]:
    """Starts Ray while the store opens; checks the cluster before anything is written.

    Returns the recorder, Ray's start time in seconds and the cluster's resources.
    """
    import ray

    # Importing MLflow and opening its store takes seconds; do it while Ray starts.
    with ThreadPoolExecutor(max_workers=1) as pool:
        opening = pool.submit(open_recorder, plan.tracking_uri, plan.spec.name)
        ray_start = time.perf_counter()
        _start_ray(plan)
        ray_start_s = time.perf_counter() - ray_start
        try:
            recorder = opening.result()
            # Ray would queue a trial no node can hold forever.
            placement.check_cluster(ray.nodes(), plan.cpus_per_trial, plan.gpus_per_trial)
            return recorder, ray_start_s, dict(ray.cluster_resources())
        except BaseException:
            ray.shutdown()
            raise


def search_tags(
    plan: SearchPlan,
    env: Mapping[str, str],
    resources: Mapping[str, float],
    nodes: int,
    extra_tags: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The parent run's tags: the machine, the spec, the placement, the backend and why."""
    spec, options = plan.spec, plan.options
    gpus_used = _gpus_used(plan, resources)
    compile_cache = "per search" if options.compile_cache and plan.backend == "jax" else "off"
    return {
        **env,
        **spec_tags(spec, plan.data.description, plan.data.synthetic),
        schema.DEVICE: options.device,
        schema.BACKEND: plan.backend,
        schema.BACKEND_REASON: plan.backend_choice.reason,
        schema.COMMAND: options.command_line or shlex.join(sys.argv),
        schema.CPUS_PER_TRIAL: str(plan.cpus_per_trial),
        schema.GPUS_PER_TRIAL: f"{plan.gpus_per_trial:g}",
        schema.GPUS_USED: str(gpus_used),
        schema.CPUS_USED: str(int(resources.get("CPU", 0))),
        schema.DATA_PARALLEL: str(plan.data_parallel).lower(),
        schema.RAY_ADDRESS: options.address or "local",
        schema.RAY_NODES: str(nodes),
        schema.TRIALS_PER_GPU: str(placement.trials_per_gpu(plan.gpus_per_trial)) if gpus_used else "0",
        schema.KIND: "search",
        schema.EXECUTION: plan.execution,
        **(extra_tags or {}),
        schema.COMPILE_CACHE: compile_cache,
    }


def spec_tags(spec: ExperimentSpec, data_path: str, synthetic: bool) -> dict[str, str]:
    """What a search of `spec` says about the experiment (also a baseline's, for compare to pair them)."""
    return {
        schema.SPEC_NAME: spec.name,
        schema.SPEC_HASH: spec.spec_hash,
        schema.SPEC_SOURCE: spec.source,
        schema.DATASET: spec.dataset,
        schema.DATA_PATH: data_path,
        schema.DATA_SYNTHETIC: str(synthetic).lower(),
        schema.MODEL: spec.model,
        schema.METRIC: spec.metric,
        schema.METRIC_MODE: spec.mode,
        schema.TIMING_TRAIN: spec.workload.train_metric,
        schema.METRIC_TARGET: "" if spec.target is None else f"{spec.target:g}",
    }


def search_params(spec: ExperimentSpec) -> dict[str, Any]:
    return {
        **spec.params,
        **{f"{schema.GRID_PREFIX}{axis}": list(values) for axis, values in spec.grid.items()},
        schema.PARAM_REPEATS: spec.repeats,
        schema.PARAM_SEED: spec.seed,
    }


def search_run_name(plan: SearchPlan, resources: Mapping[str, float]) -> str:
    share = f"{plan.gpus_per_trial:g} GPU/trial" if _gpus_used(plan, resources) else f"{plan.cpus_per_trial} CPU/trial"
    synthetic = " synthetic" if plan.data.synthetic else ""
    fused = f" fused ({len(plan.fused_groups)} groups)" if plan.fused_groups else ""
    return f"{plan.spec.name} {plan.options.device} {plan.backend} {share}{fused}{synthetic}"


def _gpus_used(plan: SearchPlan, resources: Mapping[str, float]) -> int:
    # On a cluster, what it offers; here, what the plan gave Ray.
    return int(resources.get("GPU", 0)) if plan.options.device == "gpu" else 0


def _recording_callback(plan: SearchPlan, recorder: Recorder, tags: Mapping[str, str], observer):
    from gridbench.search.tune_callback import RecordingCallback

    spec = plan.spec
    trial_params = {**spec.params, schema.PARAM_SEED: spec.seed, schema.DATASET: spec.dataset, schema.MODEL: spec.model}
    trial_tags = {
        key: tags[key]
        for key in (schema.DEVICE, schema.BACKEND, schema.COMPILE_CACHE, schema.DATA_SYNTHETIC, schema.EXECUTION)
    }
    trial_tags[schema.KIND] = "trial"
    inner = (spec.workload.inner_axis, plan.inner_values)
    return RecordingCallback(recorder, trial_params, trial_tags, observer, inner=inner, fused=plan.fused_groups)


def _fit(plan: SearchPlan, runner: TrialRunner, callback, concurrency: int, storage: str) -> float:
    """Runs every trial through Ray Tune; returns the makespan in seconds."""
    from ray import tune

    spec, options = plan.spec, plan.options
    context = TrialContext(
        workload=spec.model,
        params=dict(spec.params),
        data=plan.data,
        device=options.device,
        backend=plan.backend,
        cpus=plan.cpus_per_trial,
        seed=spec.seed,
        gpus_per_trial=plan.gpus_per_trial,
        inner_axis=spec.workload.inner_axis,
        inner_values=plan.inner_values,
        compile_cache_dir=os.path.join(storage, "jax-cache") if options.compile_cache else None,
        fused_groups=plan.fused_groups,
    )
    param_space = {
        axis: tune.grid_search(list(values))
        for axis, values in sorted(spec.grid.items())
        if axis != spec.workload.inner_axis  # trained inside each trial
    }
    param_space[REPEAT_KEY] = tune.grid_search(list(range(spec.repeats)))
    if plan.fused_groups:  # one trial per group: its members' configurations and repeats travel in the context
        param_space = {FUSED_GROUP_KEY: tune.grid_search(list(range(len(plan.fused_groups))))}
    trainable = tune.with_resources(
        tune.with_parameters(_trainable, context=context, runner=runner),
        {"cpu": plan.cpus_per_trial, "gpu": plan.gpus_per_trial},
    )
    tuner = tune.Tuner(
        trainable,
        param_space=param_space,
        tune_config=tune.TuneConfig(max_concurrent_trials=concurrency, reuse_actors=True),
        run_config=tune.RunConfig(
            name=f"{spec.name}-{int(time.time())}",
            storage_path=storage,
            callbacks=[callback],
            verbose=0,
            failure_config=tune.FailureConfig(max_failures=0),
        ),
    )
    start = time.perf_counter()
    tuner.fit()
    return time.perf_counter() - start


def summarise(
    plan: SearchPlan,
    trials: Sequence[TrialRecord],
    concurrency: int,
    makespan_s: float,
    ray_start_s: float,
    process_start: float,
) -> SearchSummary:
    """The search's totals from its trials: pure arithmetic, no Ray, no store."""
    spec = plan.spec
    finished = [t for t in trials if t.finished]
    values = [t.metrics[spec.metric] for t in finished if spec.metric in t.metrics]
    best = (max if spec.mode == "max" else min)(values) if values else None
    return SearchSummary(
        trials_total=plan.trials_total,
        trials_finished=len(finished),
        trials_failed=len(trials) - len(finished),
        concurrency=concurrency,
        makespan_s=makespan_s,
        ray_start_s=ray_start_s,
        backend_probe_s=plan.backend_choice.probe_s,
        time_to_first_trial_s=min((t.started_at for t in trials), default=process_start) - process_start,
        trial_wall_sum_s=sum(t.metrics.get(schema.TRIAL_WALL_S, 0.0) for t in trials),
        best_metric=best,
    )


def _process_start_time() -> float:
    import psutil

    return psutil.Process().create_time()
