"""The bridge from Ray Tune to MLflow: a Tune callback, run in the driver process.

Each trial's outcome arrives as its one reported result; when the trial ends it
becomes a TrialRecord and is written at once, so a search that dies later loses
no finished trial. Imported only once Ray is needed.
"""

from __future__ import annotations

import time
from dataclasses import replace

from ray import tune

from gridbench.tracking.records import TrialRecord
from gridbench.tracking.schema import TrialStatus
from gridbench.tracking.store import Recorder
from gridbench.trial import FUSED_GROUP_KEY, REPEAT_KEY
from gridbench.trial.outcome import MalformedOutcome, TrialOutcome


class RecordingCallback(tune.Callback):
    """Turns Tune's trial events into TrialRecords, written to MLflow as each trial ends."""

    def __init__(self, recorder: Recorder, params, tags, observer, inner=(None, ()), fused=()):
        self.recorder = recorder
        # Fused execution: each Tune trial trains one group of (grid point, repeat) and reports one outcome each.
        self.fused_groups = fused
        # A workload's inner axis: each Tune trial trains all these values and reports one outcome each.
        self.inner_axis, self.inner_values = inner
        self.params = params
        self.tags = tags
        self.observer = observer
        self.records: list[TrialRecord] = []
        self._outcomes: dict[str, dict] = {}

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.observer is not None:
            self.observer.trial_started(trial.config)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if "gridbench" in result:
            self._outcomes[trial.trial_id] = result["gridbench"]

    def on_trial_complete(self, iteration, trials, trial, **info):
        reported = self._outcomes.pop(trial.trial_id, None)
        if reported is None:
            outcome = _lost_outcome(trial, "the trial ended without reporting a result")
        else:
            try:
                outcome = TrialOutcome.from_dict(reported)
            except MalformedOutcome as err:
                outcome = _lost_outcome(trial, f"the trial reported a malformed outcome ({err})")
        self._record(trial, outcome)

    def on_trial_error(self, iteration, trials, trial, **info):
        # The worker process died (a crash, an out-of-memory kill): Python never returned.
        error = trial.get_error() or "the trial's worker failed"
        lines = [line for line in str(error).splitlines() if line.strip()]
        self._record(trial, _lost_outcome(trial, lines[-1] if lines else str(error), str(error)))

    def __getstate__(self):
        # Tune pickles its callbacks into the experiment state for resuming;
        # the store client and the terminal are this process's alone.
        return {"records": [], "_outcomes": {}, "recorder": None, "observer": None, "params": {}, "tags": {}}

    def _record(self, trial, outcome: TrialOutcome):
        if self.fused_groups:
            self._record_fused(trial, outcome)
            return
        if not self.inner_axis:
            self._write(TrialRecord.from_outcome(trial.trial_id, trial.config, outcome))
            return
        # One record per inner value: its own outcome, or the group's failure for each.
        parts = outcome.group or [replace(outcome, value=value) for value in self.inner_values]
        for index, part in enumerate(parts):
            config = {**trial.config, self.inner_axis: part.value}
            self._write(TrialRecord.from_outcome(f"{trial.trial_id}-{index}", config, part))

    def _record_fused(self, trial, outcome: TrialOutcome) -> None:
        """One record per member of the trial's group: its own outcome, or the group's failure for each."""
        members = self.fused_groups[int(trial.config[FUSED_GROUP_KEY])]
        parts = outcome.group or [outcome] * len(members)
        for index, ((config, repeat), part) in enumerate(zip(members, parts)):
            record = TrialRecord.from_outcome(f"{trial.trial_id}-{index}", config, replace(part, repeat=repeat))
            self._write(record)

    def _write(self, record: TrialRecord) -> None:
        self.records.append(record)
        self.recorder.record_trial(record, self.params, self.tags)
        if self.observer is not None:
            self.observer.trial_ended(record)


def _lost_outcome(trial, error: str, traceback: str | None = None) -> TrialOutcome:
    """For a trial whose own outcome never arrived (or arrived malformed)."""
    now = time.time()
    return TrialOutcome(
        TrialStatus.FAILED,
        started_at=getattr(trial, "start_time", None) or now,
        ended_at=now,
        repeat=int(trial.config.get(REPEAT_KEY, 0)),
        error=error[:500],
        traceback=traceback,
    )
