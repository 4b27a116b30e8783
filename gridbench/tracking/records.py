"""The records that flow from Ray Tune to MLflow and the terminal: one per trial, one per search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


def config_key(config: Mapping[str, Any]) -> str:
    """A grid point as a stable, readable string: "batch_size=128 hidden_units=256"."""
    return " ".join(f"{k}={config[k]}" for k in sorted(config))


@dataclass(frozen=True)
class TrialRecord:
    trial_id: str
    config: Mapping[str, Any]  # the grid point: axis values only
    repeat: int
    status: str  # "FINISHED" or "FAILED"
    metrics: Mapping[str, float]
    tags: Mapping[str, str]
    started_at: float  # Unix time, from the worker's clock
    ended_at: float
    epoch_times: tuple[float, ...] = ()
    error: str | None = None
    traceback: str | None = None

    @property
    def key(self) -> str:
        return config_key(self.config)

    @property
    def finished(self) -> bool:
        return self.status == "FINISHED"

    @classmethod
    def from_outcome(cls, trial_id: str, config: Mapping[str, Any], outcome: Mapping[str, Any]) -> TrialRecord:
        """From the dict a trial returns (gridbench.trial.run_trial)."""
        return cls(
            trial_id=trial_id,
            config={k: v for k, v in config.items() if k != "repeat"},
            repeat=int(outcome.get("repeat", config.get("repeat", 0))),
            status=outcome["status"],
            metrics=dict(outcome.get("metrics", {})),
            tags=dict(outcome.get("tags", {})),
            started_at=float(outcome["started_at"]),
            ended_at=float(outcome["ended_at"]),
            epoch_times=tuple(outcome.get("epoch_times", ())),
            error=outcome.get("error"),
            traceback=outcome.get("traceback"),
        )


@dataclass(frozen=True)
class SearchSummary:
    """What a whole search cost, measured in the driver."""

    trials_total: int
    trials_finished: int
    trials_failed: int
    concurrency: int  # trials the resources allow at once
    makespan_s: float  # Tuner.fit() from start to end
    ray_start_s: float  # starting or joining the Ray cluster
    time_to_first_trial_s: float  # command start (process creation) to the first trial's start
    trial_wall_sum_s: float
    best_metric: float | None
    backend_probe_s: float = 0.0  # asking backends in subprocesses whether they see a GPU, before Ray starts

    @property
    def ideal_makespan_s(self) -> float:
        """The sum of trial times spread perfectly over the concurrency."""
        return self.trial_wall_sum_s / self.concurrency if self.concurrency else 0.0

    @property
    def overhead_ratio(self) -> float:
        """Makespan over the ideal; 1.0 means the harness cost nothing beyond training."""
        return self.makespan_s / self.ideal_makespan_s if self.ideal_makespan_s else float("nan")

    def metrics(self) -> dict[str, float]:
        values = {
            "trials_total": self.trials_total,
            "trials_finished": self.trials_finished,
            "trials_failed": self.trials_failed,
            "concurrency": self.concurrency,
            "makespan_s": self.makespan_s,
            "ray_start_s": self.ray_start_s,
            "backend_probe_s": self.backend_probe_s,
            "time_to_first_trial_s": self.time_to_first_trial_s,
            "trial_wall_sum_s": self.trial_wall_sum_s,
            "overhead_ratio": self.overhead_ratio,
            "overhead_s": self.makespan_s - self.ideal_makespan_s,
        }
        if self.best_metric is not None:
            values["best_metric"] = self.best_metric
        return {k: float(v) for k, v in values.items()}
