"""A Recorder that keeps a search in memory: search logic, summaries and comparisons, tested without a store."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.stored_searches import SearchRun, TrialRun

_ids = itertools.count(1)


@dataclass
class RecordedRun:
    run_id: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    status: str = SearchStatus.RUNNING.value
    started_at: float = 0.0
    ended_at: float | None = None


class MemoryRecorder:
    """Records as MlflowRecorder does (the same names, statuses and schema tag), into lists."""

    def __init__(self, spec_name: str = "memory"):
        self.experiment_name = f"gridbench/{spec_name}"
        self.parent_run_id: str | None = None
        self.parent: RecordedRun | None = None
        self.trials: list[RecordedRun] = []
        self.documents: dict[str, Any] = {}

    def start(
        self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str], documents: Mapping[str, Any]
    ) -> str:
        self.parent_run_id = f"memory-{next(_ids)}"
        self.parent = RecordedRun(
            self.parent_run_id,
            run_name,
            dict(params),
            {**tags, schema.SCHEMA: str(schema.SCHEMA_VERSION)},
            started_at=time.time(),
        )
        self.documents = dict(documents)
        return self.parent_run_id

    def record_trial(self, trial: TrialRecord, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        run = RecordedRun(
            f"memory-{next(_ids)}",
            f"{trial.key} #{trial.repeat}",
            {**params, **trial.config, schema.PARAM_REPEAT: trial.repeat},
            {
                schema.PARENT_RUN: str(self.parent_run_id),
                schema.SCHEMA: str(schema.SCHEMA_VERSION),
                schema.TRIAL_ID: trial.trial_id,
                schema.CONFIG_KEY: trial.key,
                **tags,
                **trial.tags,
                **({schema.ERROR: trial.error} if trial.error else {}),
            },
            dict(trial.metrics),
            trial.status.value,
            trial.started_at,
            trial.ended_at,
        )
        self.trials.append(run)
        return run.run_id

    def resume(self, parent_run_id: str, tags: Mapping[str, str]) -> None:
        if self.parent is None or self.parent.run_id != parent_run_id:
            raise KeyError(f"no search {parent_run_id} in this memory store")
        self.parent.tags.update(tags)
        self.parent.tags.pop(schema.ERROR, None)
        self.parent.status = SearchStatus.RUNNING.value

    def finish(self, summary: SearchSummary | None, status: SearchStatus, error: str | None = None) -> None:
        if self.parent is None:
            return
        if summary is not None:
            self.parent.metrics.update(summary.metrics())
        if error:
            self.parent.tags[schema.ERROR] = error
        self.parent.status = status.value

    def search_run(self) -> SearchRun:
        """The search as gridbench.tracking.read_search would read it back from MLflow."""
        parent = self.parent
        start = parent.started_at
        axes = {k[len(schema.GRID_PREFIX) :] for k in parent.params if k.startswith(schema.GRID_PREFIX)}
        trials = tuple(
            TrialRun(
                key=run.tags[schema.CONFIG_KEY],
                config={k: str(v) for k, v in run.params.items() if k in axes},
                repeat=int(run.params[schema.PARAM_REPEAT]),
                status=run.status,
                metrics=run.metrics,
                ended_s=(run.ended_at or start) - start,
                diverged=run.tags.get(schema.DIVERGED) == "true",
                started_s=run.started_at - start,
                worker=f"{run.tags.get(schema.HOST, '')}:{run.tags.get(schema.PID, '')}",
            )
            for run in self.trials
        )
        return SearchRun(
            run_id=parent.run_id,
            tags=parent.tags,
            params={k: str(v) for k, v in parent.params.items()},
            metrics=parent.metrics,
            trials=tuple(sorted(trials, key=lambda t: (t.key, t.repeat))),
        )
