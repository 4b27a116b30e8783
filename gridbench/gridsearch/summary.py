"""A search's totals from its trials (summarise) and the account of the whole command (with_account).

Pure arithmetic over TrialRecords: no Ray, no store.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

from gridbench import account
from gridbench.gridsearch.options import SearchPlan
from gridbench.gridsearch.precompile import PrecompileReport
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import TrialStatus

if TYPE_CHECKING:
    from gridbench.gridsearch.resume import ResumePoint


def summarise(
    plan: SearchPlan,
    trials: Sequence[TrialRecord],
    concurrency: int,
    makespan_s: float,
    ray_start_s: float,
    process_start: float,
    resume: ResumePoint | None = None,
    fit_started_at: float | None = None,
    precompiled: PrecompileReport | None = None,
    workers_prestarted: int = 0,
    store_opened_at: float | None = None,
) -> SearchSummary:
    """The search's totals from its trials: pure arithmetic, no Ray, no store.

    A resumed search counts the trials finished before among its finished trials and its
    best metric; its makespan and trial times are this session's (`trials_resumed` says how many were not).
    """
    spec = plan.spec
    finished = [t for t in trials if t.finished]
    # A retried attempt is not a failed trial: the trial ran again.
    failed = [t for t in trials if t.status is TrialStatus.FAILED and t.tags.get(schema.RETRIED) != "true"]
    # A diverged trial's accuracy (a constant prediction's) is no result: it never is the best.
    values = [t.metrics[spec.metric] for t in finished if t.ranked and spec.metric in t.metrics]
    resumed = len(resume.finished) if resume is not None else 0
    values += list(resume.metric_values) if resume is not None else []
    best = (max if spec.mode == "max" else min)(values) if values else None
    return SearchSummary(
        trials_total=plan.trials_total,
        trials_finished=len(finished) + resumed,
        trials_failed=len(failed),
        concurrency=concurrency,
        makespan_s=makespan_s,
        ray_start_s=ray_start_s,
        backend_probe_s=plan.backend_choice.probe_s,
        time_to_first_trial_s=min((t.started_at for t in trials), default=process_start) - process_start,
        trial_wall_sum_s=sum(t.metrics.get(schema.TRIAL_WALL_S, 0.0) for t in trials),
        best_metric=best,
        session=resume.sessions_before + 1 if resume is not None else 1,
        trials_resumed=resumed,
        earlier_makespan_s=resume.earlier_makespan_s if resume is not None else 0.0,
        epochs_sum_s=sum(t.metrics.get(schema.TRAIN_EPOCHS_S, 0.0) for t in trials),
        training_sum_s=sum(account.trial_parts(t.metrics, spec.workload.train_metric)["training_s"] for t in trials),
        startup_s=(fit_started_at if fit_started_at is not None else process_start) - process_start,
        trials_diverged=sum(t.diverged for t in finished),
        **_precompile_fields(precompiled or PrecompileReport()),
        precompile_beside_first_trial_s=beside_first_trial(precompiled, trials),
        workers_prestarted=workers_prestarted,
        **imports_ahead(trials, fit_started_at),
        store_open_after_launch_s=(
            max(0.0, store_opened_at - fit_started_at) if store_opened_at and fit_started_at else 0.0
        ),
    )


def imports_ahead(trials: Sequence[TrialRecord], launched_at: float | None) -> dict:
    """The trials' workers started before Tune's start (`launched_at`, Unix time), those that imported ahead
    (gridbench.trial.prestart), their imports added up (each worker's once), and how long after Tune's start the
    last of them ended: what the trials may have waited for."""
    imported, seconds, ended, ahead = set(), {}, [], set()
    for trial in trials:
        worker = (trial.tags.get(schema.HOST, ""), trial.tags.get(schema.PID, ""))
        if trial.tags.get(schema.WORKER_IMPORTED_AHEAD) == "true":
            imported.add(worker)
        if schema.WORKER_IMPORT_AHEAD_S in trial.metrics:  # the worker's first trial (a group's members: each)
            seconds[worker] = trial.metrics[schema.WORKER_IMPORT_AHEAD_S]
            ended.append(trial.metrics[schema.WORKER_IMPORT_AHEAD_ENDED_AT])
        started = trial.metrics.get(schema.WORKER_PROCESS_STARTED_AT)
        if started is not None and launched_at is not None and started < launched_at:
            ahead.add(worker)  # Tune starts no worker before its start: this one was asked for ahead
    after = max(ended) - launched_at if ended and launched_at is not None else 0.0
    return {
        "workers_started_ahead": len(ahead),
        "workers_imported_ahead": len(imported),
        "import_ahead_s": sum(seconds.values()),
        "import_ahead_after_launch_s": max(0.0, after),
    }


def with_account(
    plan: SearchPlan,
    summary: SearchSummary,
    trials: Sequence[TrialRecord],
    command_start: float,
    command_end: float,
    compile_warmup_s: float = 0.0,
) -> SearchSummary:
    """The summary with the account of the whole command (gridbench.account), now that the search has ended."""
    summary = dataclasses.replace(summary, compile_warmup_s=compile_warmup_s)
    members = [(f"{t.tags.get(schema.HOST, '')}:{t.tags.get(schema.PID, '')}", t.started_at, t.ended_at, t.metrics,
                t.status is TrialStatus.FAILED) for t in trials]  # fmt: skip
    timings = account.timings_of(members, plan.spec.workload.train_metric)
    parts = account.account(
        timings, command_start, command_end, summary.concurrency, summary.precompile_wait_s, summary.compile_warmup_s
    )
    return dataclasses.replace(summary, account=parts.account.parts())


def beside_first_trial(report: PrecompileReport | None, trials: Sequence[TrialRecord]) -> float:
    """How long the compiling processes still ran after the first trial began (0: they had ended, or none ran).

    A GPU search's trials start beside them (a CPU search's wait for them). A worker that starts meanwhile shares
    the machine with them, and its first trial waits for its program however the wait falls between its import,
    its setup and its compile phase: in seven first runs on one H100 and one H200, with the same code, the three
    took 5.9-8.4 s together, while the import alone took 1.2-7.0 s (docs/results/around-training.md, eighteenth)."""
    if report is None or not report.processes or not trials:
        return 0.0
    return max(0.0, report.ended_at - min(t.started_at for t in trials))


def _precompile_fields(report: PrecompileReport) -> dict:
    return {
        "precompile_processes": report.processes,
        "programs_precompiled": report.programs,
        "programs_precompile_loaded": report.loaded,
        "programs_precompile_failed": report.failed,
        "precompile_failures": report.failures,
        "precompile_s": report.wall_s,
        "precompile_compile_s": report.compile_sum_s,
        "precompile_wait_s": report.wait_s,
    }
