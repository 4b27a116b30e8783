"""The bridge from Ray Tune to MLflow: a Tune callback, run in the driver process.

Each trial's outcome arrives as its one reported result; when the trial ends it
becomes a TrialRecord and is written at once, so a search that dies later loses
no finished trial. Imported only once Ray is needed.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import replace
from typing import Callable, Collection

from ray import tune

from gridbench import collector
from gridbench.gridsearch.lifecycle import SearchOutOfSpace
from gridbench.tracking import schema
from gridbench.tracking.records import TrialRecord
from gridbench.tracking.schema import TrialStatus
from gridbench.tracking.store import Recorder
from gridbench.trial import FUSED_GROUP_KEY, REPEAT_KEY, failure
from gridbench.trial.outcome import MalformedOutcome, TrialOutcome

# Under a trial timeout, a trial whose worker has not begun its own work (started, framework imported) this long
# after Tune started it is stopped too: a worker that hangs in its start would hold its slot forever.
WORKER_START_ALLOWANCE_S = 120.0


class RecordingCallback(tune.Callback):
    """Turns Tune's trial events into TrialRecords, written to MLflow as each trial ends."""

    def __init__(
        self,
        recorder: Recorder,
        params,
        tags,
        observer,
        inner=(None, ()),
        finished: Collection = (),
        fused=(),
        trial_timeout_s: float | None = None,
        dead_workers: Callable[[str], failure.Failure] | None = None,
        started_dir: str | None = None,
    ):
        self.recorder = recorder
        # --trial-timeout: a trial running longer is stopped (its worker killed) and recorded FAILED, kind timeout.
        self.trial_timeout_s = trial_timeout_s
        self.timed_out: dict[str, float] = {}  # trial id -> seconds it had run when it was stopped
        self.started_dir = (
            started_dir  # where each trial notes when its own work began (trial.trial_runner.note_started)
        )
        # Why a worker died, from its log (gridbench.gridsearch.failures.DeadWorkers); Ray's error alone otherwise.
        self.dead_workers = dead_workers
        # (config key, repeat) of trials a resumed search finished before: a group retrained around them skips them.
        self.finished_before = set(finished)
        # Fused execution: each Tune trial trains one group of (grid point, repeat) and reports one outcome each.
        self.fused_groups = fused
        # A workload's inner axis: each Tune trial trains all these values and reports one outcome each.
        self.inner_axis, self.inner_values = inner
        self.params = params
        self.tags = tags
        self.observer = observer
        self.records: list[TrialRecord] = []
        self._outcomes: dict[str, dict] = {}
        # Each running trial's start as the driver saw it (its actor started), and its attempt (1, then retries).
        self.running: dict[str, tuple[object, float]] = {}
        self._attempts: dict[str, int] = {}
        self.stopping = False  # SearchOutOfSpace raised: the search is ending

    def on_trial_start(self, iteration, trials, trial, **info):
        if self.started_dir:  # an earlier attempt's note
            with contextlib.suppress(OSError):
                os.remove(os.path.join(self.started_dir, trial.trial_id))
        self.running[trial.trial_id] = (trial, time.time())
        self._attempts[trial.trial_id] = self._attempts.get(trial.trial_id, 0) + 1
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
        if reported is None or outcome.error and schema.FAILURE_KIND not in outcome.tags:
            _tag_failure(outcome, failure.Failure(failure.EXCEPTION, outcome.error or "the trial failed"))
        self._record(trial, outcome)
        self.stop_if_out_of_space()

    def on_trial_error(self, iteration, trials, trial, **info):
        # The worker process died (a crash, an out-of-memory kill): Python never returned.
        self._record(trial, self._died_outcome(trial))
        self.stop_if_out_of_space()

    def on_trial_recover(self, iteration, trials, trial, **info):
        # The worker died and Tune runs the trial again (--retries): this attempt is a FAILED run of its own.
        outcome = self._died_outcome(trial)
        outcome.tags[schema.RETRIED] = "true"
        self._record(trial, outcome)
        self.stop_if_out_of_space()

    def on_step_end(self, iteration, trials, **info):
        self.stop_if_store_failed()
        self.stop_timed_out()
        # The store's writer thread may find the disk full between trials' ends.
        self.stop_if_out_of_space()
        if self.running:
            # A trial's actor has started and Tune has sent it its work (TuneController._actor_started): the
            # driver's one collection after its start-up (gridbench.collector) now runs while it waits for that
            # trial, no longer before Tune's start.
            collector.resume_after_startup()

    def stop_timed_out(self) -> None:
        """Kills the worker of each trial running past the timeout (Tune's loop steps every 0.1 s or sooner).

        ray.kill ends the worker process whatever it is doing (a sleep, a loop in native code), so that no hung
        process keeps its GPU; Tune then reports the trial's error and starts a new worker for the next trial.
        """
        if not self.trial_timeout_s:
            return
        now = time.time()
        for trial_id, (trial, started) in list(self.running.items()):
            began = self._own_start(trial_id)
            # Before its own work began (its worker starting, its framework importing), a trial has an allowance.
            deadline = (began if began is not None else started + WORKER_START_ALLOWANCE_S) + self.trial_timeout_s
            if trial_id in self.timed_out or now < deadline:
                continue
            self.timed_out[trial_id] = now - (began if began is not None else started)
            trial.max_failures = 0  # a timeout is never retried (Trial.should_recover)
            actor = getattr(getattr(trial, "temporary_state", None), "ray_actor", None)
            if actor is not None:
                import ray

                ray.kill(actor, no_restart=True)

    def stop_if_store_failed(self) -> None:
        """Stops the search with the store's own error where it did not open beside Tune's start (store_opening)."""
        error = getattr(self.recorder, "opening_error", None)
        if error is not None and not self.stopping:
            self.stopping = True
            raise error

    def stop_if_out_of_space(self) -> None:
        """Raises SearchOutOfSpace (once) when the recorder could not write for lack of space.

        Only after a trial's records are all handed over (never between a group's members).
        """
        fault = getattr(self.recorder, "fault", None)
        if fault is not None and not self.stopping:
            self.stopping = True
            raise SearchOutOfSpace(fault)

    def record_unfinished(self, ended_by: str) -> None:
        """Trials still running when the search was stopped: KILLED runs, with the time they had."""
        for trial_id in list(self.running):
            trial, started = self.running[trial_id]
            self._outcomes.pop(trial_id, None)
            outcome = _lost_outcome(
                trial, f"stopped by {ended_by} after {time.time() - started:.1f} s", started=started
            )
            outcome.status = TrialStatus.KILLED
            outcome.tags[schema.ENDED_BY] = ended_by
            self._record(trial, outcome)

    def _own_start(self, trial_id: str) -> float | None:
        """When the trial's own work began, as its worker noted it (None: not yet, or on another node)."""
        if not self.started_dir:
            return None
        try:
            with open(os.path.join(self.started_dir, trial_id)) as note:
                return float(note.read())
        except (OSError, ValueError):
            return None

    def _died_outcome(self, trial) -> TrialOutcome:
        self._outcomes.pop(trial.trial_id, None)
        error = _trial_error(trial)
        started = self.running.get(trial.trial_id, (None, None))[1]
        outcome = _lost_outcome(trial, death_reason(error), str(error), started=started)
        ran_s = self.timed_out.pop(trial.trial_id, None)
        if ran_s is not None:
            cause = failure.of_timeout(self.trial_timeout_s, ran_s)
            outcome.error = cause.message  # Ray's error says only that the worker was killed (by the timeout)
        elif self.dead_workers is not None:
            cause = self.dead_workers(str(error))
        else:
            cause = failure.of_dead_worker(str(error))
        _tag_failure(outcome, cause)
        return outcome

    def __getstate__(self):
        # Tune pickles its callbacks into the experiment state for resuming;
        # the store client and the terminal are this process's alone.
        return {
            "records": [],
            "_outcomes": {},
            "recorder": None,
            "observer": None,
            "params": {},
            "tags": {},
            "running": {},
            "_attempts": {},
            "finished_before": set(),
            "stopping": False,
            "trial_timeout_s": None,
            "timed_out": {},
            "dead_workers": None,
            "started_dir": None,
        }

    def _record(self, trial, outcome: TrialOutcome):
        self.running.pop(trial.trial_id, None)
        outcome.tags[schema.ATTEMPT] = str(self._attempts.get(trial.trial_id, 1))
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
        if (record.key, record.repeat) in self.finished_before:
            return
        self.records.append(record)
        self.recorder.record_trial(record, self.params, self.tags)
        if self.observer is not None:
            self.observer.trial_ended(record)


def _tag_failure(outcome: TrialOutcome, cause: failure.Failure) -> None:
    outcome.tags.update({schema.FAILURE_KIND: cause.kind, schema.FAILURE_MESSAGE: cause.message})


def _lost_outcome(trial, error: str, traceback: str | None = None, started: float | None = None) -> TrialOutcome:
    """For a trial whose own outcome never arrived (or arrived malformed): the time it ran, as the driver saw it."""
    now = time.time()
    started = started or now
    return TrialOutcome(
        TrialStatus.FAILED,
        started_at=started,
        ended_at=now,
        repeat=int(trial.config.get(REPEAT_KEY, 0)),
        metrics={schema.TRIAL_WALL_S: now - started},
        error=error[:500],
        traceback=traceback,
    )


def _trial_error(trial):
    """The error that ended the trial's latest attempt, as Tune wrote it beside the trial (pickled, else text)."""
    pickled = trial.pickled_error_file
    if pickled and os.path.exists(pickled):
        try:
            import cloudpickle

            with open(pickled, "rb") as file:
                return cloudpickle.load(file)
        except Exception:  # noqa: BLE001 - an unreadable pickle: the text below says the same
            pass
    text = trial.error_file
    if text and os.path.exists(text):
        with open(text, encoding="utf-8", errors="replace") as file:
            latest = file.read().rsplit("Failure # ", 1)[-1]
        return latest.split("\n", 1)[-1].strip() or "the trial's worker failed"
    return "the trial's worker failed"


def death_reason(error) -> str:
    """Ray's reason a trial's worker died, in one line: the error's first line and Ray's exit detail."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    name = "" if isinstance(error, str) else f"{type(error).__name__}: "
    first = lines[0] if lines else type(error).__name__
    detail = next((line for line in lines if "exit detail" in line.lower()), "")
    if detail:
        detail = detail[detail.lower().index("worker exit type") if "worker exit type" in detail.lower() else 0 :]
        for advice in (" Some common causes", " There are some potential root causes"):
            detail = detail.split(advice)[0]
    return f"{name}{first}" + (f" ({detail.strip()})" if detail and detail not in first else "")
