"""Reading searches back from MLflow: the parent run's facts and its trials, as plain records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.schema import On, SearchStatus, TrialStatus
from gridbench.tracking.stale import mark_stale, mark_stale_searches
from gridbench.tracking.store import experiment_name, quiet_mlflow


@dataclass(frozen=True)
class TrialRun:
    key: str  # the configuration, as records.config_key writes it
    config: Mapping[str, str]
    repeat: int
    status: str  # MLflow's run status: a TrialStatus, or RUNNING/KILLED for a trial cut short
    metrics: Mapping[str, float]
    ended_s: float  # seconds after the search started
    diverged: bool = False  # FINISHED, but its training loss became NaN or inf: no result for time to accuracy
    started_s: float = 0.0  # seconds after the search started
    worker: str = ""  # host:pid of the worker process that ran it
    run_id: str = ""  # its MLflow run
    device: str = ""  # where the framework put the model (device.actual: cpu:0, gpu:0); "" where not recorded

    @property
    def finished(self) -> bool:
        return self.status == TrialStatus.FINISHED.value


@dataclass(frozen=True)
class SearchRun:
    """One search as MLflow holds it: the parent run's facts (read as the current schema) and its trials."""

    run_id: str
    tags: Mapping[str, str]
    params: Mapping[str, str]  # fixed hyperparameters, grid.* axes, repeats, seed
    metrics: Mapping[str, float]
    trials: tuple[TrialRun, ...]
    experiment_id: str = ""  # its MLflow experiment ("" where not read from a store)

    def __post_init__(self):
        # Older runs lack what later schema versions write on every run: read them through its defaults.
        tags, metrics = schema.upgrade(self.tags, self.metrics, On.SEARCH)
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "metrics", metrics)

    @property
    def label(self) -> str:
        device = self.tags.get(schema.DEVICE, "?")
        if device == "gpu":
            share = self.tags.get(schema.GPUS_PER_TRIAL, "1")
            gpus = self.tags.get(schema.GPUS_USED, "?")
            device = f"gpu x{gpus}" + (f" ({share}/trial)" if share not in ("1", "") else "")
        else:
            cores = self.tags.get(schema.CPUS_PER_TRIAL, "?")
            device = f"cpu ({cores} core{'' if cores == '1' else 's'}/trial)"
        pilot = " pilot" if self.tags.get(schema.PILOT) == "true" else ""
        return f"{device} {self.tags.get(schema.BACKEND, '')}{pilot} {self.run_id[:8]}".strip()

    @property
    def timing_train(self) -> str:
        """The metric that says how long its workload trained (steady_epoch_s, fit_s)."""
        return self.tags[schema.TIMING_TRAIN]

    @property
    def fixed_params(self) -> dict[str, str]:
        return {
            k: v
            for k, v in self.params.items()
            if not k.startswith(schema.GRID_PREFIX)
            and k not in (schema.PARAM_REPEATS, schema.PARAM_SEED, *schema.PLACEMENT_PARAMS)
        }


def read_search(tracking_uri: str, run_id: str):
    """A search's parent run and its trials, as gridbench.tracking.stored_searches.SearchRun."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    try:
        parent = client.get_run(run_id)
    except MlflowException:
        raise UserError(f"no run {run_id} in {tracking_uri}; give a search's parent run id") from None
    if parent.data.tags.get(schema.KIND) != "search":
        raise UserError(f"run {run_id} is not a gridbench search (a trial or a comparison?); give a parent run id")
    if mark_stale(client, [parent], tracking_uri):  # left RUNNING by a dead driver: KILLED from now on
        parent = client.get_run(run_id)
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.{schema.PARENT_RUN} = '{run_id}'", max_results=50000
    )
    started_ms = parent.info.start_time
    trials = []
    # A resumed search reran what had not finished: a configuration's FINISHED run supersedes its earlier attempts.
    done = {
        (c.data.tags.get(schema.CONFIG_KEY, ""), c.data.params.get(schema.PARAM_REPEAT, "0"))
        for c in children
        if c.info.status == TrialStatus.FINISHED.value
    }
    for child in children:
        key = (child.data.tags.get(schema.CONFIG_KEY, ""), child.data.params.get(schema.PARAM_REPEAT, "0"))
        if key in done and child.info.status != TrialStatus.FINISHED.value:
            continue
        config = {k: v for k, v in child.data.params.items() if k in _grid_axes(parent.data.params)}
        trials.append(
            TrialRun(
                key=child.data.tags.get(schema.CONFIG_KEY, ""),
                config=config,
                repeat=int(child.data.params.get(schema.PARAM_REPEAT, 0)),
                status=child.info.status,
                metrics=schema.upgrade(child.data.tags, child.data.metrics, On.TRIAL)[1],
                ended_s=((child.info.end_time or started_ms) - started_ms) / 1000,
                diverged=child.data.tags.get(schema.DIVERGED) == "true",
                started_s=((child.info.start_time or started_ms) - started_ms) / 1000,
                worker=f"{child.data.tags.get(schema.HOST, '')}:{child.data.tags.get(schema.PID, '')}",
                run_id=child.info.run_id,
                device=child.data.tags.get(schema.DEVICE_ACTUAL, child.data.tags.get(schema.DEVICE_REQUESTED, "")),
            )
        )
    return SearchRun(
        run_id=run_id,
        tags=dict(parent.data.tags),
        params=dict(parent.data.params),
        metrics=dict(parent.data.metrics),
        trials=tuple(sorted(trials, key=lambda t: (t.key, t.repeat))),
        experiment_id=parent.info.experiment_id,
    )


def _grid_axes(params: Mapping[str, str]) -> set[str]:
    return {k[len(schema.GRID_PREFIX) :] for k in params if k.startswith(schema.GRID_PREFIX)}


def latest_searches(tracking_uri: str, spec_name: str) -> list[str]:
    """The newest finished search of `spec_name` on each device, CPU first."""
    from mlflow import MlflowClient

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name(spec_name))
    if experiment is None:
        raise UserError(f"no searches of {spec_name!r} in {tracking_uri}; run `gridbench search {spec_name}` first")
    mark_stale_searches(client, [experiment.experiment_id], tracking_uri)
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{schema.KIND}` = 'search' and attributes.status = '{SearchStatus.FINISHED.value}'",
        order_by=["attributes.start_time DESC"],
        max_results=1000,
    )
    newest: dict[str, str] = {}
    for run in runs:
        if run.data.tags.get(schema.PILOT) != "true":  # a pilot stands for a search; it is not one to compare
            newest.setdefault(run.data.tags.get(schema.DEVICE, "?"), run.info.run_id)
    if len(newest) < 2:
        found = ", ".join(newest) or "none"
        raise UserError(
            f"--experiment {spec_name}: finished searches on one device only ({found}); run the other device's "
            f"search, or give run ids"
        )
    return [newest[d] for d in sorted(newest, key=lambda d: (d != "cpu", d))]


def run_kind(tracking_uri: str, run_id: str) -> str:
    """search, trial, comparison or scale; a UserError for a run that is not there."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    try:
        run = client.get_run(run_id)
        mark_stale(client, [run], tracking_uri)
        return run.data.tags.get(schema.KIND, "")
    except MlflowException:
        raise UserError(f"no run {run_id} in {tracking_uri}; give a search's, comparison's or scale's run id") from None


def artifact_text(tracking_uri: str, run_id: str, name: str) -> str | None:
    """A run's text artifact, or None where it has none of that name."""
    import tempfile
    from pathlib import Path

    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    quiet_mlflow()
    with tempfile.TemporaryDirectory(prefix="gridbench-artifact-") as scratch:
        try:
            return Path(MlflowClient(tracking_uri).download_artifacts(run_id, name, scratch)).read_text(
                encoding="utf-8"
            )
        except (MlflowException, OSError):
            return None


def earlier_runs(tracking_uri: str, search: SearchRun, limit: int = 5) -> list[SearchRun]:
    """Up to `limit` other finished searches of the same experiment on the same host and device, newest first:
    their parent runs only (no trials), for the run-to-run spread (gridbench.comparison.spread keeps those that
    ran the same search the same way)."""
    from mlflow import MlflowClient

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    filters = [
        f"tags.`{schema.KIND}` = 'search'",
        f"attributes.status = '{SearchStatus.FINISHED.value}'",
        *(f"tags.`{key}` = '{search.tags[key]}'" for key in (schema.DEVICE, schema.HOST) if search.tags.get(key)),
    ]
    runs = client.search_runs(
        [search.experiment_id], filter_string=" and ".join(filters), order_by=["attributes.start_time DESC"],
        max_results=limit + 1,
    )  # fmt: skip
    found = [
        SearchRun(r.info.run_id, dict(r.data.tags), dict(r.data.params), dict(r.data.metrics), (), r.info.experiment_id)
        for r in runs
        if r.info.run_id != search.run_id
    ]
    return found[:limit]


def is_pilot(tracking_uri: str, run_id: str) -> bool:
    """Whether the run is a pilot's search (search --pilot); False for any other run, or none."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    quiet_mlflow()
    try:
        return MlflowClient(tracking_uri).get_run(run_id).data.tags.get(schema.PILOT) == "true"
    except MlflowException:
        return False


def pilots_for(tracking_uri: str, search: SearchRun, limit: int = 3) -> list[SearchRun]:
    """The pilots that stood for this search (its parameters, device, host and backend), newest first."""
    from mlflow import MlflowClient

    from gridbench.tracking.records import params_key

    if search.tags.get(schema.PILOT) == "true":
        return []
    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    filters = [
        f"tags.`{schema.PILOT}` = 'true'",
        f"tags.`{schema.PILOT_WHOLE_KEY}` = '{params_key(search.params)}'",
        *(f"tags.`{key}` = '{search.tags[key]}'" for key in (schema.DEVICE, schema.HOST, schema.BACKEND)
          if search.tags.get(key)),
    ]  # fmt: skip
    runs = client.search_runs(
        [search.experiment_id], filter_string=" and ".join(filters), order_by=["attributes.start_time DESC"],
        max_results=limit,
    )  # fmt: skip
    return [read_search(tracking_uri, run.info.run_id) for run in runs]
