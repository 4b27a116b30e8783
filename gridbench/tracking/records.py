"""The records that flow from Ray Tune to MLflow and the terminal: one per trial, one per search."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from gridbench.tracking import schema
from gridbench.tracking.schema import TrialStatus

if TYPE_CHECKING:  # what the worker sends; the store's side never imports the worker's
    from gridbench.trial.outcome import TrialOutcome


def config_key(config: Mapping[str, Any]) -> str:
    """A grid point as a stable, readable string: "batch_size=128 hidden_units=256"."""
    return " ".join(f"{k}={config[k]}" for k in sorted(config))


def param_text(value: Any) -> str:
    """A parameter as MLflow holds it: lists and tables as JSON, anything else as its text."""
    return json.dumps(value) if isinstance(value, (list, dict)) else str(value)


def params_key(params: Mapping[str, Any]) -> str:
    """A search's parameters (as MLflow holds them, placement left out), hashed: a pilot's whole search and the
    search run later share it."""
    shown = {k: param_text(v) for k, v in params.items() if k not in schema.PLACEMENT_PARAMS}
    return hashlib.sha256(json.dumps(sorted(shown.items())).encode()).hexdigest()[:16]


def _order(config: Mapping[str, Any]) -> tuple:
    """Axes by name, each value as a number where it reads as one: 256 before 1024, 0.0003 before 0.001."""

    def value(text: Any) -> tuple:
        try:
            return (0, float(text), "")
        except (TypeError, ValueError):
            return (1, 0.0, str(text))

    return tuple((axis, value(config[axis])) for axis in sorted(config))


def config_numbers(configs: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Each configuration's number (from 1), by its axes' values: the one numbering every table, page and JSON
    of a search or a comparison uses, so that #3 is the same configuration everywhere."""
    unique = {config_key(c): c for c in configs}
    ordered = sorted(unique, key=lambda key: _order(unique[key]))
    return {key: number for number, key in enumerate(ordered, start=1)}


@dataclass(frozen=True)
class TrialRecord:
    trial_id: str
    config: Mapping[str, Any]  # the grid point: axis values only
    repeat: int
    status: TrialStatus
    metrics: Mapping[str, float]
    tags: Mapping[str, str]
    started_at: float  # Unix time, from the worker's clock
    ended_at: float
    epoch_times: tuple[float, ...] = ()
    error: str | None = None
    traceback: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "status", TrialStatus(self.status))  # a plain "FINISHED" too; anything else fails

    @property
    def key(self) -> str:
        return config_key(self.config)

    @property
    def finished(self) -> bool:
        return self.status is TrialStatus.FINISHED

    @property
    def diverged(self) -> bool:
        """FINISHED, but its training loss became NaN or inf: no result to rank."""
        return self.tags.get(schema.DIVERGED) == "true"

    @property
    def ranked(self) -> bool:
        """A result that counts for the search's best, its ranking and time to accuracy."""
        return self.finished and not self.diverged

    @classmethod
    def from_outcome(cls, trial_id: str, config: Mapping[str, Any], outcome: TrialOutcome) -> TrialRecord:
        """From what a trial returned (gridbench.trial.run_trial), checked on its way to the driver.

        A finished trial whose loss became NaN or inf (the workload's diverged_epoch, or a final loss
        that is not finite) is tagged diverged. Its status stays FINISHED: it trained every epoch.
        """
        tags = dict(outcome.tags)
        loss = outcome.metrics.get(schema.TRAIN_LOSS, 0.0)
        if outcome.finished and (schema.DIVERGED_EPOCH in outcome.metrics or not math.isfinite(loss)):
            tags[schema.DIVERGED] = "true"
        return cls(
            trial_id=trial_id,
            config={k: v for k, v in config.items() if k != schema.PARAM_REPEAT},
            repeat=outcome.repeat,
            status=outcome.status,
            metrics=dict(outcome.metrics),
            tags=tags,
            started_at=outcome.started_at,
            ended_at=outcome.ended_at,
            epoch_times=tuple(outcome.epoch_times),
            error=outcome.error,
            traceback=outcome.traceback,
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
    backend_probe_s: float = 0.0  # asking backends in subprocesses whether they see a GPU, while Ray starts
    session: int = 1  # 1, then one more per --resume: makespan and trial times are this session's
    trials_resumed: int = 0  # trials finished in earlier sessions (counted in trials_finished and best_metric)
    earlier_makespan_s: float = 0.0  # earlier sessions' makespans added up
    epochs_sum_s: float = 0.0  # every trial's timed epochs added up (an epoch shared by several trials once)
    startup_s: float = 0.0  # command start to Tune's start: the start-up that overlapping left
    trials_diverged: int = 0  # finished trials whose loss became NaN or inf (left out of best_metric)
    # Programs compiled ahead in processes of their own while Ray started (gridbench.gridsearch.precompile).
    precompile_processes: int = 0
    programs_precompiled: int = 0
    programs_precompile_loaded: int = 0  # found in the compile cache already (--compile-cache persistent)
    programs_precompile_failed: int = 0  # left to the trials that need them
    precompile_failures: tuple[str, ...] = ()  # one line per program that failed: which, and why (not a metric)
    precompile_s: float = 0.0  # the processes' wall time, from their start to the last one's end
    precompile_compile_s: float = 0.0  # XLA's compilations in them, added up
    precompile_wait_s: float = 0.0  # what the trials' start waited for them (CPU searches), within the makespan
    precompile_beside_first_trial_s: float = 0.0  # how long they still ran after the first trial began
    training_sum_s: float = 0.0  # every trial's epochs at their steady time: epochs_sum_s less the warm-ups' excess
    compile_warmup_s: float = 0.0  # the command's compile warm-up before this search (gridbench.gridsearch.warmup)
    # --prestart-workers (gridbench.gridsearch.prestart): workers asked of Ray as soon as it was up; of the trials'
    # workers, those started before Tune's start and those that imported ahead; the imports added up, and how long
    # after Tune's start the last ended.
    workers_prestarted: int = 0
    workers_started_ahead: int = 0  # of the trials' workers, those whose process started before Tune's start
    workers_imported_ahead: int = 0
    import_ahead_s: float = 0.0
    import_ahead_after_launch_s: float = 0.0
    store_open_after_launch_s: float = 0.0  # the store's opening and the parent's creation, beside Tune's start
    # The whole command in parts (gridbench.account.PARTS -> seconds); empty until the search has ended.
    account: Mapping[str, float] = field(default_factory=dict)

    @property
    def training_share(self) -> float:
        """The share of the search's slot-time spent training at the steady pace: 1.0 would be training only."""
        slot_time = self.makespan_s * self.concurrency
        return self.training_sum_s / slot_time if slot_time else float("nan")

    @property
    def search_makespan_s(self) -> float:
        """The whole search's makespan: every session's added up (a search run once: its makespan)."""
        return self.earlier_makespan_s + self.makespan_s

    @property
    def whole_command_s(self) -> float | None:
        return sum(self.account.values()) if self.account else None

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
            # First: MLflow's compare view charts a run's first metric by default; the makespan is the one to read.
            schema.MAKESPAN_S: self.makespan_s,
            schema.TRIALS_TOTAL: self.trials_total,
            schema.TRIALS_FINISHED: self.trials_finished,
            schema.TRIALS_FAILED: self.trials_failed,
            schema.CONCURRENCY: self.concurrency,
            schema.RAY_START_S: self.ray_start_s,
            schema.BACKEND_PROBE_S: self.backend_probe_s,
            schema.TIME_TO_FIRST_TRIAL_S: self.time_to_first_trial_s,
            schema.TRIAL_WALL_SUM_S: self.trial_wall_sum_s,
            schema.OVERHEAD_RATIO: self.overhead_ratio,
            schema.OVERHEAD_S: self.makespan_s - self.ideal_makespan_s,
            schema.EPOCHS_SUM_S: self.epochs_sum_s,
            schema.TRAINING_SHARE: self.training_share,
            schema.STARTUP_S: self.startup_s,
            schema.SESSIONS: self.session,
            schema.SEARCH_MAKESPAN_S: self.search_makespan_s,
            schema.TRIALS_RESUMED: self.trials_resumed,
            schema.TRIALS_DIVERGED: self.trials_diverged,
            schema.PRECOMPILE_PROCESSES: self.precompile_processes,
            schema.PROGRAMS_PRECOMPILED: self.programs_precompiled,
            schema.PROGRAMS_PRECOMPILE_LOADED: self.programs_precompile_loaded,
            schema.PROGRAMS_PRECOMPILE_FAILED: self.programs_precompile_failed,
            schema.PRECOMPILE_S: self.precompile_s,
            schema.PRECOMPILE_COMPILE_S: self.precompile_compile_s,
            schema.PRECOMPILE_WAIT_S: self.precompile_wait_s,
            schema.PRECOMPILE_BESIDE_FIRST_TRIAL_S: self.precompile_beside_first_trial_s,
            schema.WORKERS_PRESTARTED: self.workers_prestarted,
            schema.WORKERS_STARTED_AHEAD: self.workers_started_ahead,
            schema.WORKERS_IMPORTED_AHEAD: self.workers_imported_ahead,
            schema.IMPORT_AHEAD_S: self.import_ahead_s,
            schema.IMPORT_AHEAD_AFTER_LAUNCH_S: self.import_ahead_after_launch_s,
            schema.STORE_OPEN_AFTER_LAUNCH_S: self.store_open_after_launch_s,
        }
        values[schema.TRAINING_SUM_S] = self.training_sum_s
        if self.account:
            values.update({schema.ACCOUNT_PREFIX + part: seconds for part, seconds in self.account.items()})
            values[schema.WHOLE_COMMAND_S] = self.whole_command_s
        if self.best_metric is not None:
            values[schema.BEST_METRIC] = self.best_metric
        return {k: float(v) for k, v in values.items()}
