"""Reading searches back from MLflow: the parent run's facts and its trials, as plain records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from gridbench.errors import UserError
from gridbench.tracking.store import experiment_name, quiet_mlflow


@dataclass(frozen=True)
class TrialRun:
    key: str  # the configuration, as records.config_key writes it
    config: Mapping[str, str]
    repeat: int
    status: str
    metrics: Mapping[str, float]
    ended_s: float  # seconds after the search started

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"


@dataclass(frozen=True)
class SearchRun:
    """One search as MLflow holds it: the parent run's facts and its trials."""

    run_id: str
    tags: Mapping[str, str]
    params: Mapping[str, str]  # fixed hyperparameters, grid.* axes, repeats, seed
    metrics: Mapping[str, float]
    trials: tuple[TrialRun, ...]

    @property
    def label(self) -> str:
        device = self.tags.get("device", "?")
        if device == "gpu":
            share = self.tags.get("gpus_per_trial", "1")
            device = f"gpu x{self.tags.get('gpus_used', '?')}" + (f" ({share}/trial)" if share not in ("1", "") else "")
        else:
            device = f"cpu ({self.tags.get('cpus_per_trial', '?')} cores/trial)"
        return f"{device} {self.tags.get('backend', '')} {self.run_id[:8]}".strip()

    @property
    def fixed_params(self) -> dict[str, str]:
        return {k: v for k, v in self.params.items() if not k.startswith("grid.") and k not in ("repeats", "seed")}


def read_search(tracking_uri: str, run_id: str):
    """A search's parent run and its trials, as gridbench.tracking.read.SearchRun."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    try:
        parent = client.get_run(run_id)
    except MlflowException:
        raise UserError(f"no run {run_id} in {tracking_uri}; give a search's parent run id") from None
    if parent.data.tags.get("gridbench.kind") != "search":
        raise UserError(f"run {run_id} is not a gridbench search (a trial or a comparison?); give a parent run id")
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{run_id}'", max_results=50000
    )
    started_ms = parent.info.start_time
    trials = []
    for child in children:
        config = {k: v for k, v in child.data.params.items() if k in _grid_axes(parent.data.params)}
        trials.append(
            TrialRun(
                key=child.data.tags.get("config_key", ""),
                config=config,
                repeat=int(child.data.params.get("repeat", 0)),
                status=child.info.status,
                metrics=dict(child.data.metrics),
                ended_s=((child.info.end_time or started_ms) - started_ms) / 1000,
            )
        )
    return SearchRun(
        run_id=run_id,
        tags=dict(parent.data.tags),
        params=dict(parent.data.params),
        metrics=dict(parent.data.metrics),
        trials=tuple(sorted(trials, key=lambda t: (t.key, t.repeat))),
    )


def _grid_axes(params: Mapping[str, str]) -> set[str]:
    return {k[len("grid.") :] for k in params if k.startswith("grid.")}


def latest_searches(tracking_uri: str, spec_name: str) -> list[str]:
    """The newest finished search of `spec_name` on each device, CPU first."""
    from mlflow import MlflowClient

    quiet_mlflow()
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name(spec_name))
    if experiment is None:
        raise UserError(f"no searches of {spec_name!r} in {tracking_uri}; run `gridbench search {spec_name}` first")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string="tags.`gridbench.kind` = 'search' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"],
        max_results=1000,
    )
    newest: dict[str, str] = {}
    for run in runs:
        newest.setdefault(run.data.tags.get("device", "?"), run.info.run_id)
    if len(newest) < 2:
        found = ", ".join(newest) or "none"
        raise UserError(
            f"--experiment {spec_name}: finished searches on one device only ({found}); run the other device's "
            f"search, or give run ids"
        )
    return [newest[d] for d in sorted(newest, key=lambda d: (d != "cpu", d))]
