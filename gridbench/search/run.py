"""Running a search: an experiment's grid as Ray Tune trials, each recorded in MLflow as it ends.

    SearchPlan -> Ray Tune trials (gridbench.trial, in workers) -> TrialRecords -> MLflow -> SearchResult

The driver is the only process that writes to MLflow: a Tune callback turns each
finished or failed trial into a TrialRecord and hands it to the SearchRecorder.
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
from typing import Any, Callable, Mapping, Protocol

from gridbench import environment
from gridbench.errors import UserError
from gridbench.search import placement
from gridbench.search.plan import SearchPlan
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.store import SearchRecorder
from gridbench.trial import REPEAT_KEY, TrialContext, run_trial

TrialRunner = Callable[[Mapping[str, Any], TrialContext], dict]


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
        num_cpus=plan.cpus,  # --cpus N: Ray hands out N cores
        num_gpus=plan.gpus,  # --gpus N: Ray hands out GPUs 0..N-1 only; none to a CPU search
        include_dashboard=False,
        **quiet,
    )


def _trainable(config: dict, context: TrialContext, runner: TrialRunner) -> None:
    """Ray Tune's function trainable: run the trial, report its outcome once."""
    import ray
    from ray import tune

    outcome = runner(config, context)
    outcome.setdefault("tags", {})["ray.node_id"] = ray.get_runtime_context().get_node_id()
    tune.report({"gridbench": outcome})


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
) -> SearchResult:
    """Runs the planned search; `observer` (gridbench.search.progress.SearchProgress) hears of each trial.

    `requested_at` (Unix time) is when the user asked for this search, for its time
    to first trial; by default the command's start (this process's creation).
    """
    spec, options = plan.spec, plan.options
    _quiet_ray()
    import ray
    from ray import tune

    from gridbench.search.tune_callback import RecordingCallback

    env = environment.collect()
    # Importing MLflow and opening its store takes seconds; do it while Ray starts.
    with ThreadPoolExecutor(max_workers=1) as pool:
        opening = pool.submit(SearchRecorder, plan.tracking_uri, spec.name)
        ray_start = time.perf_counter()
        _start_ray(plan)
        ray_start_s = time.perf_counter() - ray_start
        try:
            recorder = opening.result()
            # Before anything is written: Ray would queue a trial no node can hold forever.
            placement.check_cluster(ray.nodes(), plan.cpus_per_trial, plan.gpus_per_trial)
            resources = ray.cluster_resources()
            concurrency = plan.concurrency_on(resources.get("CPU", 0), resources.get("GPU", 0))
            # On a cluster, what it offers; here, what the plan gave Ray.
            gpus_used = int(resources.get("GPU", 0)) if options.device == "gpu" else 0
        except BaseException:
            ray.shutdown()
            raise
    storage = tempfile.mkdtemp(prefix="gridbench-ray-")
    status, error, summary = "FAILED", None, None
    try:
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
        )
        parent_tags = {
            **env,
            "device": options.device,
            "backend": plan.backend,
            "backend.reason": plan.backend_choice.reason,
            "spec.name": spec.name,
            "spec.hash": spec.spec_hash,
            "spec.source": spec.source,
            "dataset": spec.dataset,
            "data.path": plan.data.description,
            "data.synthetic": str(plan.data.synthetic).lower(),
            "model": spec.model,
            "metric": spec.metric,
            "metric.mode": spec.mode,
            "timing.train": spec.workload.train_metric,
            "metric.target": "" if spec.target is None else f"{spec.target:g}",
            "command": options.command_line or shlex.join(sys.argv),
            "cpus_per_trial": str(plan.cpus_per_trial),
            "gpus_per_trial": f"{plan.gpus_per_trial:g}",
            "gpus_used": str(gpus_used),
            "cpus_used": str(int(resources.get("CPU", 0))),
            "data_parallel": str(plan.data_parallel).lower(),
            "ray.address": plan.options.address or "local",
            "ray.nodes": str(sum(1 for n in ray.nodes() if n.get("Alive"))),
            "trials_per_gpu": str(placement.trials_per_gpu(plan.gpus_per_trial)) if gpus_used else "0",
            "gridbench.kind": "search",
            **(extra_tags or {}),
            "compile_cache": "per search" if options.compile_cache and plan.backend == "jax" else "off",
        }
        recorder.start(
            run_name=f"{spec.name} {options.device} {plan.backend} "
            + (f"{plan.gpus_per_trial:g} GPU/trial" if gpus_used else f"{plan.cpus_per_trial} CPU/trial")
            + (" synthetic" if plan.data.synthetic else ""),
            params={
                **spec.params,
                **{f"grid.{axis}": list(values) for axis, values in spec.grid.items()},
                "repeats": spec.repeats,
                "seed": spec.seed,
            },
            tags=parent_tags,
            documents={"spec.json": spec.to_dict(), "environment.json": env},
        )
        trial_params = {**spec.params, "seed": spec.seed, "dataset": spec.dataset, "model": spec.model}
        trial_tags = {
            "device": options.device,
            "backend": plan.backend,
            "compile_cache": parent_tags["compile_cache"],
            "data.synthetic": parent_tags["data.synthetic"],
            "gridbench.kind": "trial",
        }
        callback = RecordingCallback(
            recorder, trial_params, trial_tags, observer, inner=(spec.workload.inner_axis, plan.inner_values)
        )
        if observer is not None:
            observer.start(plan.trials_total)

        param_space = {
            axis: tune.grid_search(list(values))
            for axis, values in sorted(spec.grid.items())
            if axis != spec.workload.inner_axis  # trained inside each trial
        }
        param_space[REPEAT_KEY] = tune.grid_search(list(range(spec.repeats)))
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
        fit_start = time.perf_counter()
        tuner.fit()
        makespan = time.perf_counter() - fit_start

        trials = tuple(callback.records)
        finished = [t for t in trials if t.finished]
        values = [t.metrics[spec.metric] for t in finished if spec.metric in t.metrics]
        best = (max if spec.mode == "max" else min)(values) if values else None
        process_start = requested_at if requested_at is not None else _process_start_time()
        summary = SearchSummary(
            trials_total=plan.trials_total,
            trials_finished=len(finished),
            trials_failed=len(trials) - len(finished),
            concurrency=concurrency,
            makespan_s=makespan,
            ray_start_s=ray_start_s,
            backend_probe_s=plan.backend_choice.probe_s,
            time_to_first_trial_s=min((t.started_at for t in trials), default=process_start) - process_start,
            trial_wall_sum_s=sum(t.metrics.get("trial_wall_s", 0.0) for t in trials),
            best_metric=best,
        )
        status = "FINISHED"
        if len(trials) < plan.trials_total:
            status, error = "KILLED", f"the search stopped after {len(trials)} of {plan.trials_total} trials"
        return SearchResult(plan, recorder.parent_run_id, recorder.experiment_name, trials, summary)
    except KeyboardInterrupt:
        status, error = "KILLED", "interrupted"
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


def _process_start_time() -> float:
    import psutil

    return psutil.Process().create_time()
