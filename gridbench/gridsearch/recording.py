"""What a search records about itself: its tags, params and run name, and the callback that records each trial.

The names come from gridbench.tracking.schema; the recorder (gridbench.tracking) writes them.
"""

from __future__ import annotations

import shlex
import sys
from typing import Any, Mapping

from gridbench import compile_cache
from gridbench.gridsearch import placement
from gridbench.gridsearch.options import SearchPlan, prestarts_workers
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.store import Recorder


def open_store(open_recorder, plan: SearchPlan) -> tuple[Recorder, list[str]]:
    """The recorder, and the searches of this spec left RUNNING by a dead driver, now marked KILLED."""
    recorder = open_recorder(plan.tracking_uri, plan.spec.name)
    try:
        from mlflow import MlflowClient

        from gridbench.tracking.stale import mark_stale_searches
        from gridbench.tracking.store import experiment_name

        client = MlflowClient(plan.tracking_uri)
        experiment = client.get_experiment_by_name(experiment_name(plan.spec.name))
        experiment_ids = [experiment.experiment_id] if experiment else []
        return recorder, mark_stale_searches(client, experiment_ids, plan.tracking_uri)
    except Exception:  # noqa: BLE001 - a courtesy to earlier searches; never a reason to stop this one
        return recorder, []


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
        schema.COMPILE_CACHE: compile_cache.tag(options.compile_cache, plan.backend),
        schema.COMPILE_CACHE_STATE: plan.compile_cache_state if plan.backend == "jax" else "off",
        schema.COMPILE_AHEAD: options.compile_ahead,
        schema.PRESTART_WORKERS: "on" if prestarts_workers(options) else "off",
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


def placement_params(plan: SearchPlan) -> dict[str, Any]:
    """Where the trials run, as params as well as the tags: MLflow's compare view sets params side by side."""
    return {
        schema.PARAM_DEVICE: plan.options.device,
        schema.PARAM_BACKEND: plan.backend,
        schema.PARAM_CPUS_PER_TRIAL: plan.cpus_per_trial,
        schema.PARAM_GPUS_PER_TRIAL: f"{plan.gpus_per_trial:g}",
    }


def search_run_name(plan: SearchPlan, resources: Mapping[str, float]) -> str:
    share = f"{plan.gpus_per_trial:g} GPU/trial" if _gpus_used(plan, resources) else f"{plan.cpus_per_trial} CPU/trial"
    synthetic = " synthetic" if plan.data.synthetic else ""
    fused = f" fused ({len(plan.fused_groups)} groups)" if plan.fused_groups else ""
    return f"{plan.spec.name} {plan.options.device} {plan.backend} {share}{fused}{synthetic}"


def _gpus_used(plan: SearchPlan, resources: Mapping[str, float]) -> int:
    # On a cluster, what it offers; here, what the plan gave Ray.
    return int(resources.get("GPU", 0)) if plan.options.device == "gpu" else 0


def recording_callback(
    plan: SearchPlan,
    recorder: Recorder,
    tags: Mapping[str, str],
    observer,
    resume=None,
    ray_dir: str | None = None,
    started_dir: str | None = None,
):
    """`ray_dir`: the search's Ray session directory, where a dead worker's log tells why it died; `started_dir`:
    where trials note when their own work began (TrialContext.started_dir), for the trial timeout's clock."""
    from gridbench.gridsearch.failures import DeadWorkers
    from gridbench.gridsearch.tune_callback import RecordingCallback

    spec = plan.spec
    trial_params = {**spec.params, schema.PARAM_SEED: spec.seed, schema.DATASET: spec.dataset, schema.MODEL: spec.model}
    trial_params.update(placement_params(plan))
    trial_tags = {
        key: tags[key]
        for key in (schema.DEVICE, schema.BACKEND, schema.COMPILE_CACHE, schema.DATA_SYNTHETIC, schema.EXECUTION)
    }
    trial_tags[schema.KIND] = "trial"
    inner = (spec.workload.inner_axis, plan.inner_values)
    finished = resume.finished if resume is not None else ()
    return RecordingCallback(
        recorder,
        trial_params,
        trial_tags,
        observer,
        inner=inner,
        finished=finished,
        fused=plan.fused_groups,
        trial_timeout_s=plan.trial_timeout_s,
        dead_workers=DeadWorkers(ray_dir),
        started_dir=started_dir,
    )
