"""`search --resume`: continue a search that did not finish, under its own parent run.

The search to continue is the latest unfinished one of the spec in the store, or the one
named. It must have run the same spec with the same options: anything that would change
what a trial measures is listed and refused. Only the configurations and repeats without
a FINISHED run are trained again; a resumed search's parent keeps each session's makespan
(at its step) and says how many trials earlier sessions finished (`trials_resumed`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from gridbench import compile_cache
from gridbench.errors import UserError
from gridbench.gridsearch import trial_order
from gridbench.gridsearch.plan import SearchPlan
from gridbench.gridsearch.recording import search_params
from gridbench.tracking import schema
from gridbench.tracking.records import TrialRecord, config_key
from gridbench.tracking.schema import SearchStatus, TrialStatus

LATEST = "latest"  # --resume without a run id


@dataclass(frozen=True)
class ResumePoint:
    parent_run_id: str
    finished: frozenset[tuple[str, int]]  # (configuration key, repeat) with a FINISHED run
    metric_values: tuple[float, ...]  # their ranking metric, for the search's best
    sessions_before: int
    remaining: int  # configurations x repeats still to run
    earlier: tuple[TrialRecord, ...] = ()  # the trials earlier sessions finished, for the whole search's table
    earlier_makespan_s: float = 0.0  # earlier sessions' makespans added up

    def tune_points(self, plan: SearchPlan) -> list[dict[str, Any]]:
        """The Ray Tune configurations still to run (one per group where a workload trains an inner axis)."""
        return trial_order.points(plan, self.finished)


def locate(plan: SearchPlan, run_id: str = LATEST) -> ResumePoint:
    """The search to continue and what it lacks; a UserError where it cannot be continued with this plan."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from gridbench.tracking.stale import driver_alive, mark_stale_searches
    from gridbench.tracking.store import experiment_name, quiet_mlflow

    quiet_mlflow()
    client = MlflowClient(plan.tracking_uri)
    spec_name = plan.spec.name
    experiment = client.get_experiment_by_name(experiment_name(spec_name))
    if experiment is None:
        raise UserError(f"--resume: no searches of {spec_name!r} in {plan.tracking_uri}; run one without --resume")
    sync_waiting(client, plan.tracking_uri, experiment.experiment_id)
    mark_stale_searches(client, [experiment.experiment_id], plan.tracking_uri)
    if run_id == LATEST:
        candidates = client.search_runs(
            [experiment.experiment_id],
            filter_string=f"tags.`{schema.KIND}` = 'search' and attributes.status != '{SearchStatus.FINISHED.value}'",
            order_by=["attributes.start_time DESC"],
            max_results=100,
        )
        candidates = [r for r in candidates if r.info.status != SearchStatus.RUNNING.value]
        if not candidates:
            raise UserError(
                f"--resume: no unfinished search of {spec_name!r} in {plan.tracking_uri} (every one finished or is "
                f"running); run a new search without --resume"
            )
        parent = candidates[0]
    else:
        try:
            parent = client.get_run(run_id)
        except MlflowException:
            raise UserError(f"--resume {run_id}: no such run in {plan.tracking_uri}; give a search's parent run id")
        if parent.data.tags.get(schema.KIND) != "search" or parent.info.experiment_id != experiment.experiment_id:
            raise UserError(f"--resume {run_id}: not a search of {spec_name!r}; give one of its parent run ids")
        if parent.info.status == SearchStatus.RUNNING.value:
            alive = driver_alive(parent.data.tags)
            tags = parent.data.tags
            where = f"pid {schema.tag_value(tags, schema.DRIVER_PID)} on {schema.tag_value(tags, schema.DRIVER_HOST)}"
            raise UserError(
                f"--resume {run_id}: the search is still running ({where}"
                + (")" if alive else "; not this host: resume it there)")
                + "; wait for it, or stop it first"
            )
    differences = _differences(plan, parent.data.tags, parent.data.params)
    if differences:
        raise UserError(
            f"--resume {parent.info.run_id}: it ran with {'; '.join(differences)}; leave those as it ran them "
            f"(`gridbench search --resume {parent.info.run_id}` alone takes its own), or start a new search without "
            f"--resume"
        )
    children = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{schema.PARENT_RUN}` = '{parent.info.run_id}'",
        max_results=50000,
    )
    finished = {
        (child.data.tags.get(schema.CONFIG_KEY, ""), int(child.data.params.get(schema.PARAM_REPEAT, 0))): child
        for child in children
        if child.info.status == TrialStatus.FINISHED.value
    }
    metric = plan.spec.metric
    values = tuple(
        c.data.metrics[metric]
        for c in finished.values()
        if metric in c.data.metrics and c.data.tags.get(schema.DIVERGED) != "true"  # never the best
    )
    makespans = client.get_metric_history(parent.info.run_id, schema.MAKESPAN_S)
    return ResumePoint(
        parent_run_id=parent.info.run_id,
        finished=frozenset(finished),
        metric_values=values,
        sessions_before=int(parent.data.metrics.get(schema.SESSIONS, 1)),
        remaining=plan.trials_total - len(set(finished) & _all_keys(plan)),
        earlier=_records(plan, finished.values()),
        earlier_makespan_s=sum(m.value for m in makespans),
    )


def _records(plan: SearchPlan, runs) -> tuple[TrialRecord, ...]:
    """Earlier sessions' FINISHED trial runs as the records this session's table shows beside its own."""
    configurations = {config_key(c): c for c in plan.spec.configurations()}
    records = []
    for run in runs:
        key = run.data.tags.get(schema.CONFIG_KEY, "")
        records.append(
            TrialRecord(
                trial_id=run.data.tags.get(schema.TRIAL_ID, ""),
                config=configurations.get(key, {}),
                repeat=int(run.data.params.get(schema.PARAM_REPEAT, 0)),
                status=TrialStatus.FINISHED,
                metrics=dict(run.data.metrics),
                tags=dict(run.data.tags),
                started_at=run.info.start_time / 1000,
                ended_at=(run.info.end_time or run.info.start_time) / 1000,
            )
        )
    return tuple(records)


def recorded_arguments(tracking_uri: str | None, run_id: str) -> list[str]:
    """The `search` arguments (spec and options) the search `run_id` ran with, as its parent run recorded them;
    a search from before they were recorded: its command line (`--device both` as the half it was)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from gridbench.tracking.store import check_store_exists, quiet_mlflow, resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    check_store_exists(uri)
    quiet_mlflow()
    try:
        run = MlflowClient(uri).get_run(run_id)
    except MlflowException:
        raise UserError(
            f"--resume {run_id}: no such run in {uri}; give a search's parent run id, and with --tracking-uri "
            f"the store it ran in"
        ) from None
    tags = run.data.tags
    if tags.get(schema.KIND) != "search" or tags.get(schema.BASELINE):
        raise UserError(f"--resume {run_id}: not a search's parent run; give one (the run ids `search` prints)")
    recorded = tags.get(schema.RESUME_ARGUMENTS)
    if recorded:
        return list(json.loads(recorded))
    return _from_command(run_id, tags)


def _from_command(run_id: str, tags: Mapping[str, str]) -> list[str]:
    import re
    import shlex

    command = tags.get(schema.COMMAND, "")
    words = shlex.split(command)
    if "search" not in words:
        raise UserError(
            f"--resume {run_id}: its spec and options were not recorded (it ran as {command!r}); give them: "
            f"gridbench search EXPERIMENT [options] --resume {run_id}"
        )
    words = words[words.index("search") + 1 :]
    arguments: list[str] = []
    while words:
        word = words.pop(0)
        if word == "--resume":
            if words and (words[0] == run_id or re.fullmatch(r"[0-9a-f]{32}", words[0])):
                words.pop(0)
            continue
        if word.startswith("--resume="):
            continue
        if word.startswith("--device"):
            if "=" not in word and words:
                words.pop(0)
            word = f"--device={tags.get(schema.DEVICE, 'cpu')}"  # a half of --device both: that half
        arguments.append(word)
    return arguments


def sync_waiting(client, tracking_uri: str, experiment_id: str) -> None:
    """Writes to the store the journals of searches whose driver exited with records waiting there, first:
    a trial only in a journal is FINISHED and must not be trained again (nor written twice by a later sync)."""
    from gridbench.tracking.stale import waiting_searches
    from gridbench.tracking.sync import sync_journal

    for _run_id, journal in waiting_searches(client, [experiment_id]):
        report = sync_journal(journal, tracking_uri)
        print(f"gridbench: before resuming, {report.line()}", file=sys.stderr, flush=True)


def _all_keys(plan: SearchPlan) -> set[tuple[str, int]]:
    return {(config_key(c), r) for c in plan.spec.configurations() for r in range(plan.spec.repeats)}


def expected_tags(plan: SearchPlan) -> dict[str, str]:
    """The parent's tags that say what a trial measures; a resumed search must match them."""
    options = plan.options
    return {
        schema.SPEC_HASH: plan.spec.spec_hash,
        schema.DEVICE: options.device,
        schema.BACKEND: plan.backend,
        schema.CPUS_PER_TRIAL: str(plan.cpus_per_trial),
        schema.GPUS_PER_TRIAL: f"{plan.gpus_per_trial:g}",
        schema.DATA_PATH: plan.data.description,
        schema.DATA_SYNTHETIC: str(plan.data.synthetic).lower(),
        schema.COMPILE_CACHE: compile_cache.tag(options.compile_cache, plan.backend),
    }


def _differences(plan: SearchPlan, tags: Mapping[str, str], params: Mapping[str, str]) -> list[str]:
    ran = [
        f"{name} {params.get(name, '(none)')} (now {value})"
        for name, value in ((k, _as_param(v)) for k, v in search_params(plan.spec).items())
        if params.get(name) != value
    ]
    ran += [
        f"{name} {params[name]} (now none)"
        for name in params
        if name not in search_params(plan.spec) and name not in schema.PLACEMENT_PARAMS  # the tags say those
    ]
    ran += [
        f"{name} {tags.get(name, '(none)')} (now {value})"
        for name, value in expected_tags(plan).items()
        if tags.get(name) != value and name != schema.SPEC_HASH
    ]
    if not ran and tags.get(schema.SPEC_HASH) != plan.spec.spec_hash:
        ran.append(f"spec.hash {tags.get(schema.SPEC_HASH)} (now {plan.spec.spec_hash})")
    return ran


def _as_param(value: Any) -> str:
    # As MlflowRecorder stores a param.
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)
