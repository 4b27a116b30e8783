"""Running a search: an experiment's grid as Ray Tune trials, each recorded in MLflow as it ends.

    SearchPlan -> Ray Tune trials (gridbench.trial, in workers) -> TrialRecords -> MLflow -> SearchResult

The driver is the only process that writes to MLflow: a Tune callback turns each
finished or failed trial into a TrialRecord and hands it to the Recorder. The steps sit
with their kind: Ray's lifecycle (ray_session.py), what a search records about itself
(recording.py, summary.py), driving Ray Tune (tuning.py).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

from gridbench import disk_space, environment
from gridbench.gridsearch import lifecycle
from gridbench.gridsearch.lifecycle import SearchInterrupted
from gridbench.gridsearch.options import SearchPlan
from gridbench.gridsearch.ray_session import RaySession, precompile_report, start_search
from gridbench.gridsearch.recording import (
    placement_params,
    recording_callback,
    search_params,
    search_run_name,
    search_tags,
)
from gridbench.gridsearch.store_opening import OpeningRecorder
from gridbench.gridsearch.summary import summarise, with_account
from gridbench.gridsearch.tuning import TrialRunner, fit, trial_context
from gridbench.tracking import schema
from gridbench.tracking.journaled import open_journaled_recorder
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.stale import driver_tags, resume_command
from gridbench.tracking.store import Recorder
from gridbench.trial import run_trial

if TYPE_CHECKING:
    from gridbench.gridsearch.resume import ResumePoint


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
    trials: tuple[TrialRecord, ...]  # this session's
    summary: SearchSummary
    earlier: tuple[TrialRecord, ...] = ()  # a resumed search: the trials earlier sessions finished

    @property
    def all_trials(self) -> tuple[TrialRecord, ...]:
        """The whole search's trials, every session's."""
        return self.earlier + self.trials


def run_search(
    plan: SearchPlan,
    observer: SearchObserver | None = None,
    runner: TrialRunner = run_trial,
    requested_at: float | None = None,
    extra_tags: Mapping[str, str] | None = None,
    open_recorder: Callable[[str, str], Recorder] = open_journaled_recorder,
    resume: ResumePoint | None = None,
    session: RaySession | None = None,
    compile_warmup_s: float = 0.0,
) -> SearchResult:
    """Runs the planned search; `observer` (gridbench.gridsearch.progress.SearchProgress) hears of each trial.

    `requested_at` (Unix time) is when the user asked for this search, for its time
    to first trial; by default the command's start (this process's creation).
    `open_recorder(tracking_uri, spec_name)` opens where the records go: by default MLflow
    behind a journal (gridbench.tracking.journaled), written off Tune's callback thread.
    `resume` (gridbench.gridsearch.resume.locate) continues that search: only its trials not
    FINISHED run, recorded under its parent run. `session`: the Ray that planning started
    (RaySession); by default Ray starts here. `compile_warmup_s`: the command compiled every search's
    programs that long before this one (gridbench.gridsearch.warmup), within `requested_at`'s span.

    SIGINT or SIGTERM raise SearchInterrupted once the parent is KILLED and the running
    trials recorded as KILLED; on every path Ray's processes and the search's directory go.
    """
    session = session or RaySession()
    recorder, callback, fit_started, fit_started_at = None, None, None, None
    status, error, summary, stop = SearchStatus.FAILED, None, None, None
    concurrency, ray_start_s = 1, 0.0
    process_start = requested_at if requested_at is not None else _process_start_time()

    def summary_now(records) -> SearchSummary:  # the trials so far, over the time the trials have run
        makespan = time.perf_counter() - fit_started
        return summarise(
            plan, tuple(records), concurrency, makespan, ray_start_s, process_start, resume, fit_started_at,
            precompile_report(session), session.workers_prestarted, getattr(recorder, "opened_at", None),
        )  # fmt: skip

    try:
        recorder, ray_start_s, concurrency, tags = _start_parent(plan, open_recorder, session, extra_tags, resume)
        context, callback = _trials_context(plan, session, recorder, tags, observer, resume)
        if observer is not None:
            observer.start(plan.trials_total if resume is None else resume.remaining)
        fit_started, fit_started_at = time.perf_counter(), time.time()
        session.before_trials(plan)
        fit(plan, runner, callback, concurrency, context, session.directory.tune_dir, resume, session.actors_plain)
        session.signals.check()
        recorder.ready()  # a store that never opened fails the search, though its trials ran
        summary = summary_now(callback.records)
        status, error = _status(plan, summary)
    except BaseException as err:
        stop = _as_stop(err, session, recorder)
        if stop is None:
            error = f"{type(err).__name__}: {err}"
            raise
        status, error = SearchStatus.KILLED, stop.report()
        if callback is not None:
            callback.record_unfinished(stop.ended_by)
            if fit_started is not None:  # the time it ran, so that a resumed search's sessions all count
                summary = summary_now(callback.records)
        if isinstance(stop, lifecycle.SearchOutOfSpace) and hasattr(recorder, "announce_unsynced"):
            recorder.announce_unsynced = False  # the stop's one line names the sync command
        if stop is not err:
            raise stop from None
        raise
    finally:
        if observer is not None:
            observer.stop()
        try:
            session.stop()  # before the account ends: Ray's shutdown is part of the command a user waits for
        finally:
            if summary is not None and callback is not None:
                summary = with_account(plan, summary, callback.records, process_start, time.time(), compile_warmup_s)
            try:
                if recorder is not None:
                    recorder.finish(summary, status, error)
            finally:
                if stop is not None:
                    stop.hint = _stop_hint(plan, recorder, callback, resume, stop)
    return _result(plan, recorder, callback, summary, resume)


def _result(plan: SearchPlan, recorder, callback, summary: SearchSummary, resume) -> SearchResult:
    earlier = resume.earlier if resume is not None else ()  # a resumed search: what earlier sessions finished
    trials = tuple(callback.records)
    return SearchResult(plan, recorder.parent_run_id, recorder.experiment_name, trials, summary, earlier)


def _start_parent(
    plan: SearchPlan, open_recorder, session: RaySession, extra_tags: Mapping[str, str] | None, resume
) -> tuple[OpeningRecorder, float, int, dict[str, str]]:
    """Ray started, the store opening and the parent run then started (or resumed) on a thread (store_opening).

    Returns the recorder, Ray's start time in seconds, the trials the cluster allows at once, and the tags.
    """
    import ray

    opening, ray_start_s, resources = start_search(plan, open_recorder, session)
    concurrency = plan.concurrency_on(resources.get("CPU", 0), resources.get("GPU", 0))
    tags = search_tags(plan, {}, resources, len([n for n in ray.nodes() if n.get("Alive")]), extra_tags)
    tags.update(driver_tags())
    tags[schema.RAY_START] = session.ray_start
    tags[schema.TRIAL_WORKERS] = session.trial_workers

    def start_parent(recorder: Recorder) -> None:
        env = environment.collect()  # the machine's facts (NVML, versions): beside Tune's start too
        if resume is not None:
            recorder.resume(resume.parent_run_id, {**env, **tags})
        else:
            pilot = " pilot" if (extra_tags or {}).get(schema.PILOT) == "true" else ""  # seen in MLflow's run list
            recorder.start(
                run_name=search_run_name(plan, resources) + pilot,
                params={**search_params(plan.spec), **placement_params(plan)},
                tags={**env, **tags},
                documents={"spec.json": plan.spec.to_dict(), "environment.json": env},
            )
        session.describe_search(plan, recorder)  # if Ray's node dies, Ray ends this process: the watchdog ends it

    return OpeningRecorder(opening, start_parent, plan.tracking_uri), ray_start_s, concurrency, tags


def _trials_context(plan: SearchPlan, session: RaySession, recorder: Recorder, tags, observer, resume):
    """What every trial shares (TrialContext), and the Tune callback that records each one as it ends."""
    context = trial_context(plan, session.directory.tune_dir, precompiled=session.compiling_ahead)
    where = {"ray_dir": session.directory.ray_dir, "started_dir": context.started_dir}
    return context, recording_callback(plan, recorder, tags, observer, resume, **where)


def _status(plan: SearchPlan, summary: SearchSummary) -> tuple[SearchStatus, str | None]:
    """FINISHED, or KILLED with why where fewer trials ended than the plan has."""
    ran = summary.trials_finished + summary.trials_failed
    if ran < plan.trials_total:
        return SearchStatus.KILLED, f"the search stopped after {ran} of {plan.trials_total} trials"
    return SearchStatus.FINISHED, None


def _as_stop(err: BaseException, session: RaySession, recorder) -> lifecycle.SearchStopped | None:
    """What stopped the search, if something outside it did: a signal, or a disk that filled; else None."""
    if isinstance(err, lifecycle.SearchStopped):
        return err
    fault = getattr(recorder, "fault", None)
    received = session.signals.received if session.signals is not None else None
    if isinstance(err, KeyboardInterrupt):
        # Ray's C++ side turns the handler's exception into a plain KeyboardInterrupt: the handler knows the signal.
        if received is None and fault is not None:
            return lifecycle.SearchOutOfSpace(fault)
        return SearchInterrupted(received or signal.SIGINT)
    if disk_space.is_out_of_space(err):  # Tune's own files, Ray's session, a store write outside the writer
        return lifecycle.SearchOutOfSpace(fault or disk_space.fault_of(err))
    return None


def _stop_hint(plan: SearchPlan, recorder, callback, resume, stop: lifecycle.SearchStopped) -> str:
    """What was kept and how to go on, for the stop's one line."""
    if recorder is None or recorder.parent_run_id is None:
        later = " once there is space" if isinstance(stop, lifecycle.SearchOutOfSpace) else ""
        return f"nothing was recorded; run the search again{later}"
    run_id = recorder.parent_run_id
    kept = sum(t.finished for t in callback.records) if callback is not None else 0
    kept += len(resume.finished) if resume else 0
    hint = f"search {run_id} KILLED with {kept} of {plan.trials_total} trials finished"
    command = f"`{resume_command(run_id, plan.tracking_uri)}`"
    if not isinstance(stop, lifecycle.SearchOutOfSpace):
        return f"{hint}; continue it with {command}"
    lost = getattr(recorder, "lost", 0)
    hint += f" ({lost} of them written nowhere)" if lost else " (in the store or its journal)"
    unsynced = recorder.unsynced_hint() if hasattr(recorder, "unsynced_hint") else None
    if unsynced:
        hint += f"; free some space, write what the store lacks with `{recorder.sync_command()}`, then continue"
        return f"{hint} with {command}"
    return f"{hint}; free some space, then continue it with {command}"


def _process_start_time() -> float:
    """When this process started (Unix time), to the clock tick.

    psutil's create_time adds the start to the boot time in whole seconds, up to a second off: too coarse
    for an account that must add up to the command within 2%. Linux says how long ago, in ticks since boot.
    """
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the name
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        import psutil

        return psutil.Process().create_time()
