"""What the terminal shows: live progress while trials run, then a table of results."""

from __future__ import annotations

import collections
import math
import shlex
from typing import TYPE_CHECKING, Mapping

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from gridbench import account, compile_cache
from gridbench.tables import Column, fitted
from gridbench.tracking import schema, ui_command
from gridbench.tracking.records import SearchSummary, TrialRecord, config_numbers
from gridbench.tracking.schema import TrialStatus
from gridbench.trial import failure

if TYPE_CHECKING:
    from gridbench.gridsearch import SearchResult


# The timing columns of the results table, by the workload's training-time metric: (header, metric, digits).
TIMING_COLUMNS = {
    schema.STEADY_EPOCH_S: (
        ("setup s", schema.SETUP_S, 3),
        ("compile s", schema.COMPILE_S, 3),  # compiled loops only
        ("warm-up s", schema.WARMUP_EPOCH_S, 3),
        ("steady s/epoch", schema.STEADY_EPOCH_S, 4),
        ("± sd", schema.STEADY_EPOCH_STD_S, 2),
        ("samples/s", schema.SAMPLES_PER_S, 3),
        ("eval s", schema.EVAL_S, 3),
        ("wall s", schema.TRIAL_WALL_S, 3),
    ),
    schema.FIT_S: (
        ("setup s*", schema.SETUP_S, 3),
        ("warm-up s*", "warmup_s", 3),
        ("gram s*", "gram_s", 3),
        ("gram TFLOP/s", "gram_tflops", 3),
        ("solve s", "solve_s", 3),
        ("fit s", schema.FIT_S, 4),
        ("eval s", schema.EVAL_S, 3),
        ("wall s", schema.TRIAL_WALL_S, 3),
    ),
}


class SearchProgress:
    """A progress bar (trials done/total, elapsed, ETA) and one line per finished trial."""

    def __init__(self, console: Console, metric: str, train_metric: str = schema.STEADY_EPOCH_S):
        self.metric = metric
        self.train_metric = train_metric
        self.progress = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[state]}"),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
        )
        self.task = None
        self.running = 0
        self.failed = 0
        self.killed = 0  # stopped with the search (a signal, a full disk): not failed

    def start(self, total: int) -> None:
        self.progress.start()
        self.task = self.progress.add_task("search", total=total, state="")

    def trial_started(self, config) -> None:
        self.running += 1
        self._update()

    def trial_ended(self, record: TrialRecord) -> None:
        self.running = max(0, self.running - 1)
        if record.finished:
            m = record.metrics
            if self.train_metric == schema.STEADY_EPOCH_S:
                steady, warmup = _fmt(m.get(schema.STEADY_EPOCH_S)), _fmt(m.get(schema.WARMUP_EPOCH_S))
                timing = f"steady {steady} s/epoch, warm-up {warmup} s"
                if schema.COMPILE_S in m:
                    timing += f", program {_program_source(record.tags)} in {_fmt(m[schema.COMPILE_S])} s"
                    timing += _program_split(m)
            elif schema.SHARED_BY in m:  # trained in a group: its own part and an equal part of the shared
                timing = f"fit {_fmt(m.get(self.train_metric))} s (solve + Gram share)"
            else:
                timing = f"{self.train_metric} {_fmt(m.get(self.train_metric))} s"
            quality = f"{self.metric} {_fmt(m.get(self.metric))}, " if self.metric in m else ""
            state = "[green]done[/]"
            if record.diverged:  # its metric is no result: say why first
                state, quality = "[yellow]diverged[/]", f"{_divergence(m)} ({quality.rstrip(', ') or 'no result'}), "
            self.progress.console.print(
                f"{state} {record.key} #{record.repeat}: {quality}"
                f"{timing}, wall {_fmt(m.get(schema.TRIAL_WALL_S))} s on {record.tags.get(schema.DEVICE_ACTUAL, '?')}"
            )
        else:
            if record.status is TrialStatus.KILLED:
                self.killed += 1
            else:
                self.failed += 1
            self.progress.console.print(unfinished_line(record))
        self.progress.advance(self.task)
        self._update()

    def _update(self) -> None:
        state = f"{self.running} running" + (f", [red]{self.failed} failed[/]" if self.failed else "")
        state += f", [yellow]{self.killed} killed[/]" if self.killed else ""
        self.progress.update(self.task, state=state)

    def stop(self) -> None:
        self.progress.stop()


def _divergence(metrics: Mapping[str, float]) -> str:
    epoch = metrics.get(schema.DIVERGED_EPOCH)
    where = f" at epoch {epoch:.0f}" if epoch is not None else ""
    return f"training loss became {_fmt(metrics.get(schema.TRAIN_LOSS))}{where}"


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def _cell(metrics: Mapping[str, float], key: str, digits: int) -> str:
    if key == schema.STEADY_EPOCH_STD_S and metrics.get(schema.STEADY_EPOCHS, 2) < 2:
        return ""  # one timed epoch has no spread to show (its recorded 0 is not a measured one)
    return _fmt(metrics.get(key), digits)


def trials_tables(result: SearchResult, width: int | None = None) -> list[Table]:
    """Finished trials ranked by the experiment's metric, in as many tables as `width` columns need.

    Nothing is cut. The first table has the configuration's number and axes, then the
    columns that matter most (accuracy, the training time, the device, the wall time) while
    they fit; the rest follow in further tables keyed by the same number. One table when all
    fit.
    """
    spec = result.plan.spec
    axes = sorted(spec.grid)
    trials = result.all_trials  # a resumed search: every session's
    finished = [t for t in trials if t.ranked]
    diverged = [t for t in trials if t.finished and t.diverged]  # listed last, unranked
    failed = [t for t in trials if not t.finished]
    timing_columns = TIMING_COLUMNS[spec.workload.train_metric]
    if result.plan.data.synthetic:  # random labels: no accuracy to show, rank by training time
        metric, mode = spec.workload.train_metric, "min"
        title = f"{spec.name} on synthetic data (timings only): {len(finished)} finished, {len(failed)} failed"
    else:
        metric, mode = spec.metric, spec.mode
        title = f"{spec.name}: {len(finished)} finished, {len(failed)} failed, ranked by {metric} ({mode})"
    if diverged:
        title += f"; {len(diverged)} diverged (unranked, last)"
    if result.earlier:
        title += f"; {len(result.earlier)} finished in earlier sessions, {len(result.trials)} in this one"
    finished.sort(key=lambda t: t.metrics.get(metric, math.nan), reverse=mode == "max")
    finished += diverged

    # Rows in rank order; '#' is the configuration's number, as compare's tables, the page and the JSON number
    # it (with its repeat, '3.1', where there are repeats: the key that links a wide table's rows).
    numbers = config_numbers(t.config for t in trials)
    if spec.repeats > 1:
        columns = [Column("#.repeat", [f"{numbers[t.key]}.{t.repeat}" for t in finished], key=True)]
    else:
        columns = [Column("#", [str(numbers[t.key]) for t in finished], key=True)]
    columns += [Column(axis, [str(t.config.get(axis, "")) for t in finished], key=True) for axis in axes]
    if result.earlier:
        earlier = {id(t) for t in result.earlier}
        columns.append(Column("session", ["earlier" if id(t) in earlier else "this" for t in finished], key=True))
    if not result.plan.data.synthetic:
        columns.append(Column(spec.metric, [_fmt(t.metrics.get(spec.metric)) for t in finished]))
    for header, key, digits in timing_columns:
        if key == schema.COMPILE_S and not any(key in t.metrics for t in finished):
            continue  # no compiled loop in this search
        columns.append(Column(header, [_cell(t.metrics, key, digits) for t in finished]))
    columns.append(Column("device", [t.tags.get(schema.DEVICE_ACTUAL, "?") for t in finished], justify="left"))

    by_key = {key: header for header, key, _ in timing_columns}
    first = [spec.metric, by_key[spec.workload.train_metric], "device", by_key[schema.TRIAL_WALL_S]]
    return fitted(title, columns, width, first)


def startup_line(s: SearchSummary) -> str:
    """When the first trial started, and what came before it: the backends' probe, Ray's start, the store's opening."""
    probe = f"asking the backends about GPUs {s.backend_probe_s:.1f} s, " if s.backend_probe_s else ""
    store = (
        f"; the store was open {s.store_open_after_launch_s:.1f} s after the launch"
        if s.store_open_after_launch_s >= 0.05
        else ""
    )
    return (
        f"The first trial started {s.time_to_first_trial_s:.1f} s after the command: the trials were launched "
        f"after {s.startup_s:.1f} s ({probe}Ray's start {s.ray_start_s:.1f} s, overlapping), the first worker "
        f"began {max(0.0, s.time_to_first_trial_s - s.startup_s):.1f} s later{store}."
    )


def print_search(console: Console, result: SearchResult, project_hint: bool = True) -> None:
    s = result.summary
    for table in trials_tables(result, console.width):
        console.print(table)
    inner = result.plan.spec.workload.inner_axis
    if inner:
        console.print(
            f"* shared by the configurations trained together in one trial (every {inner} of a group); "
            f"fit s = its own solve + an equal part of the shared Gram and factorisation; "
            f"wall s = its own solve and evaluation + an equal part of the rest of the trial's wall time"
        )
    if result.plan.fused_groups:
        console.print(
            f"fused execution: {len(result.plan.fused_groups)} group(s), each trained as one vectorised program; "
            f"a trial's times are its equal share of its group's (fused_with; the group's own in group_* metrics)"
        )
    for trial in result.trials:
        if not trial.finished:
            console.print(unfinished_line(trial))
    kinds = collections.Counter(  # by trial: a retried attempt's run has its line above, and the trial its last
        t.tags.get(schema.FAILURE_KIND)
        for t in result.trials
        if not t.finished and t.tags.get(schema.RETRIED) != "true"
    )
    if any(kinds):
        named = ", ".join(f"{kinds[kind]} {failure.LABELS[kind]}" for kind in failure.KINDS if kinds[kind])
        console.print(f"failed trials by cause: {named} (each one's cause and fix above, and in its run's failure.*)")
    for line in summary_lines(s, result.plan.spec.metric):
        console.print(line, highlight=False)
    if s.account:
        parts = account.Account(**s.account)
        console.print(
            f"Where the whole command's {parts.whole_command_s:.1f} s went: {account.one_line(parts)}. Paid once per "
            f"search: {parts.one_off_s:.1f} s; the trials' steady cost, which grows with a search's size: "
            f"{parts.steady_s:.1f} s."
        )
    if s.workers_imported_ahead or (s.workers_prestarted and result.plan.options.prestart_workers):  # not plain ones
        console.print(imports_ahead_line(s, result.plan.backend), highlight=False)
    console.print(startup_line(s), highlight=False)
    if s.precompile_processes:
        console.print(
            f"programs compiled ahead: {s.programs_precompiled} by {s.precompile_processes} process(es) started "
            f"beside Ray, {s.precompile_s:.1f} s (XLA {s.precompile_compile_s:.1f} s in all)"
            + (f"; {s.programs_precompile_loaded} found in the cache" if s.programs_precompile_loaded else "")
            + (
                f"; {s.programs_precompile_failed} failed (their trials compiled them)"
                if s.programs_precompile_failed
                else ""
            )
            + (
                f"; the trials waited {s.precompile_wait_s:.1f} s for them, in the makespan"
                if s.precompile_wait_s
                else ""
            )
        )
        if s.account and s.precompile_beside_first_trial_s > 0:
            console.print(beside_first_trial_line(s), highlight=False)
    elif s.programs_precompile_loaded:
        console.print(
            f"programs compiled ahead: none needed, all {s.programs_precompile_loaded} found ready in the compile "
            "cache (the trials load them)",
            highlight=False,
        )
    for failed in s.precompile_failures:
        console.print(f"compiling ahead failed for {escape(failed)} (its trials compiled it)", highlight=False)
    sources = collections.Counter(_program_source(t.tags) for t in result.trials if schema.PROGRAM_REUSED in t.tags)
    if sources:
        counts = ", ".join(f"{sources[k]} {k}" for k in PROGRAM_SOURCES if sources[k])
        note = _cache_note(result.plan.options.compile_cache, result.plan.backend)
        console.print(f"Trials' programs: {counts}{note}.", highlight=False)
    console.print(f"MLflow: experiment {result.experiment_name!r}, parent run {result.parent_run_id}")
    console.print(f"Browse: {ui_command(result.plan.tracking_uri)}")
    if project_hint and s.account and s.trials_finished == s.trials_total:
        console.print(f"What it would take at another size (projected): {project_command(result)}", soft_wrap=True)


def beside_first_trial_line(s: SearchSummary) -> str:
    """Where the first trial began while compiling ahead still ran: how the first workers' wait split between the
    account's workers' start and compiling depends on timing, and their sum is what to read
    (gridbench.gridsearch.summary.beside_first_trial)."""
    start, compiling = s.account.get("worker_start_s", 0.0), s.account.get("compile_s", 0.0)
    return (
        f"Compiling ahead ran on for {s.precompile_beside_first_trial_s:.1f} s after the first trial began, while "
        f"the first workers started: how their wait split between workers' start ({start:.1f} s) and compiling "
        f"({compiling:.1f} s) depends on timing; their sum, {start + compiling:.1f} s, is what to read."
    )


def imports_ahead_line(s, backend: str) -> str:
    """--prestart-workers: the workers started ahead and their imports, apart from the account's workers' start."""
    after = s.import_ahead_after_launch_s
    when = f"the last ended {after:.1f} s after Tune's start" if after > 0 else "all ended before Tune's start"
    return (
        f"Workers started ahead: {s.workers_prestarted} asked of Ray as soon as it was up, "
        f"{s.workers_started_ahead} of them ran trials; {s.workers_imported_ahead} worker(s) imported their "
        f"framework ({backend}) and the trial's modules before their first trial, {s.import_ahead_s:.1f} s in all, "
        f"within the start-up and outside the trials' times "
        f"({when}); the account's workers' start is what the trials still paid."
    )


def project_command(result: SearchResult) -> str:
    """`python -m gridbench compare RUN --project epochs=N --tracking-uri URI`, ready to paste: 10x the epochs
    (or the configurations, for a workload without a fixed number of epochs)."""
    spec = result.plan.spec
    epochs = spec.params.get("epochs")
    size = f"epochs={int(epochs) * 10}" if isinstance(epochs, int) and epochs >= 2 else f"configs={spec.grid_size * 10}"
    uri = shlex.quote(result.plan.tracking_uri)
    return f"python -m gridbench compare {result.parent_run_id} --project {size} --tracking-uri {uri}"


def summary_lines(s, metric: str) -> list[str]:
    """The search's figures as sentences; a resumed search's whole first, then this session's, labelled."""
    lines = []
    ran = s.trials_total - s.trials_resumed
    this = "The search"
    if s.session > 1:
        best = f"; best {metric} {s.best_metric:.4g}" if s.best_metric is not None else ""
        lines.append(
            f"The whole search: {s.trials_finished} of {s.trials_total} trials finished over {s.session} sessions, "
            f"in {s.search_makespan_s:.1f} s of makespan (earlier sessions {s.earlier_makespan_s:.1f} s, "
            f"{s.trials_resumed} trials){best}."
        )
        this = f"This session (session {s.session}, resumed)"
    overhead = (s.overhead_ratio - 1) * 100 if s.overhead_ratio == s.overhead_ratio else float("nan")
    if s.concurrency == 1:
        ideal = f"One at a time, its trials' own times add up to {s.ideal_makespan_s:.1f} s"
    else:
        ideal = f"Spread evenly over {s.concurrency} slots, its trials' own times take {s.ideal_makespan_s:.1f} s"
    lines.append(f"{this} took {s.makespan_s:.1f} s (makespan) for {ran} trials, up to {s.concurrency} at a time.")
    lines.append(f"{ideal}: the search took {overhead:.0f}% longer (overhead ratio {s.overhead_ratio:.2f}).")
    lines.append(
        f"Training at the steady pace ({s.training_sum_s:.1f} s of epochs) filled {s.training_share:.0%} of the "
        f"trial slots' time (training share {s.training_share:.2f})."
    )
    return lines


def unfinished_line(record: TrialRecord) -> str:
    """A FAILED or KILLED trial's line: its cause and fix where one was told (failure.message), else its error."""
    said = record.tags.get(schema.FAILURE_MESSAGE) or record.error or ""
    return f"[red]{record.status.value}[/] {escape(record.key)} #{record.repeat}: {escape(said)}"


PROGRAM_SOURCES = ("compiled", "loaded from the compile cache", "reused")


def _program_source(tags) -> str:
    if tags.get(schema.PROGRAM_REUSED) == "yes":
        return "reused"
    return "loaded from the compile cache" if tags.get(schema.PROGRAM_CACHED) == "yes" else "compiled"


def _program_split(metrics) -> str:
    """Where getting the program went, by JAX's clocks and gridbench's: ' (trace 0.12, lower 0.03, backend 0.2 s:
    cache read 0.1)' through JAX's cache, ' (executable read 0.05 s)' for a saved program (saved_programs),
    ', executable write 0.03 s' after one that was compiled and saved."""
    if schema.PROGRAM_BACKEND_S not in metrics:
        return ""
    jax_clocks = (schema.PROGRAM_TRACE_S, schema.PROGRAM_LOWER_S, schema.PROGRAM_BACKEND_S)
    read, write = (
        metrics.get(schema.PROGRAM_EXECUTABLE_READ_S, 0.0),
        metrics.get(schema.PROGRAM_EXECUTABLE_WRITE_S, 0.0),
    )
    parts = []
    if any(metrics.get(clock) for clock in jax_clocks) or not read:
        trace, lower = _fmt(metrics.get(schema.PROGRAM_TRACE_S), 2), _fmt(metrics.get(schema.PROGRAM_LOWER_S), 2)
        backend = f"backend {_fmt(metrics[schema.PROGRAM_BACKEND_S], 2)} s"
        if metrics.get(schema.PROGRAM_CACHE_READ_S):
            backend += f": cache read {_fmt(metrics[schema.PROGRAM_CACHE_READ_S], 2)}"
        parts.append(f"trace {trace}, lower {lower}, {backend}")
    if read:
        parts.append(f"executable read {_fmt(read, 2)} s")
    if write:
        parts.append(f"executable write {_fmt(write, 2)} s")
    return f" ({', '.join(parts)})"


def _cache_note(setting: str, backend: str) -> str:
    """Where compiled programs are kept: JAX's cache only (a TensorFlow or torch search keeps none)."""
    if backend != "jax":
        return f" ({backend} keeps no compiled programs across trials' processes; --compile-cache is JAX's)"
    if setting == compile_cache.PERSISTENT:
        return f"; JAX's compile cache {compile_cache.persistent_dir()}, kept across searches"
    return "; compiled once per search" if setting == compile_cache.SEARCH else "; JAX's compile cache off"
