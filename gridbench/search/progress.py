"""What the terminal shows: live progress while trials run, then a table of results."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from gridbench.tracking import schema, ui_command
from gridbench.tracking.records import TrialRecord

if TYPE_CHECKING:
    from gridbench.search import SearchResult


# The timing columns of the results table, by the workload's training-time metric: (header, metric, digits).
TIMING_COLUMNS = {
    schema.STEADY_EPOCH_S: (
        ("setup s", schema.SETUP_S, 3),
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
                timing = f"steady {_fmt(m.get('steady_epoch_s'))} s/epoch, warm-up {_fmt(m.get('warmup_epoch_s'))} s"
            else:
                timing = f"{self.train_metric} {_fmt(m.get(self.train_metric))} s"
            quality = f"{self.metric} {_fmt(m.get(self.metric))}, " if self.metric in m else ""
            self.progress.console.print(
                f"[green]done[/] {record.key} #{record.repeat}: {quality}"
                f"{timing}, wall {_fmt(m.get(schema.TRIAL_WALL_S))} s on {record.tags.get(schema.DEVICE_ACTUAL, '?')}"
            )
        else:
            self.failed += 1
            self.progress.console.print(f"[red]FAILED[/] {record.key} #{record.repeat}: {record.error}")
        self.progress.advance(self.task)
        self._update()

    def _update(self) -> None:
        state = f"{self.running} running" + (f", [red]{self.failed} failed[/]" if self.failed else "")
        self.progress.update(self.task, state=state)

    def stop(self) -> None:
        self.progress.stop()


def _fmt(value: float | None, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.{digits}g}"


def trials_table(result: SearchResult) -> Table:
    """Finished trials ranked by the experiment's metric (failed ones are listed below it)."""
    spec = result.plan.spec
    axes = sorted(spec.grid)
    finished = [t for t in result.trials if t.finished]
    failed = [t for t in result.trials if not t.finished]
    columns = TIMING_COLUMNS[spec.workload.train_metric]
    if result.plan.data.synthetic:  # random labels: no accuracy to show, rank by training time
        metric, mode, shown = spec.workload.train_metric, "min", [header for header, _, _ in columns]
        title = f"{spec.name} on synthetic data (timings only): {len(finished)} finished, {len(failed)} failed"
    else:
        metric, mode, shown = spec.metric, spec.mode, [spec.metric, *(header for header, _, _ in columns)]
        title = f"{spec.name}: {len(finished)} finished, {len(failed)} failed, ranked by {metric} ({mode})"
    finished.sort(key=lambda t: t.metrics.get(metric, math.nan), reverse=mode == "max")

    table = Table(title=title)
    table.add_column("#", justify="right")
    for axis in axes:
        table.add_column(axis, justify="right")
    if spec.repeats > 1:
        table.add_column("repeat", justify="right")
    for column in shown:
        table.add_column(column, justify="right")
    table.add_column("device")
    for rank, trial in enumerate(finished, start=1):
        m = trial.metrics
        row = [str(rank), *(str(trial.config.get(a, "")) for a in axes)]
        if spec.repeats > 1:
            row.append(str(trial.repeat))
        if not result.plan.data.synthetic:
            row.append(_fmt(m.get(spec.metric)))
        row += [_fmt(m.get(key), digits) for _, key, digits in columns]
        row.append(trial.tags.get(schema.DEVICE_ACTUAL, "?"))
        table.add_row(*row)
    return table


def print_search(console: Console, result: SearchResult) -> None:
    s = result.summary
    console.print(trials_table(result))
    inner = result.plan.spec.workload.inner_axis
    if inner:
        console.print(
            f"* shared by the configurations trained together in one trial (every {inner} of a group); "
            f"fit s = own solve + an equal part of the shared Gram and factorisation; "
            f"wall s = an equal part of the trial's wall time"
        )
    for trial in result.trials:
        if not trial.finished:
            console.print(f"[red]FAILED[/] {trial.key} #{trial.repeat}: {trial.error}")
    console.print(
        f"makespan {s.makespan_s:.1f} s for {s.trials_total} trials at concurrency {s.concurrency}; "
        f"sum of trial times / concurrency {s.ideal_makespan_s:.1f} s; overhead ratio {s.overhead_ratio:.2f}; "
        f"first trial started {s.time_to_first_trial_s:.1f} s after the command ("
        + (f"backend probe {s.backend_probe_s:.1f} s, " if s.backend_probe_s else "")
        + f"Ray start {s.ray_start_s:.1f} s)"
    )
    console.print(f"MLflow: experiment {result.experiment_name!r}, parent run {result.parent_run_id}")
    console.print(f"Browse: {ui_command(result.plan.tracking_uri)}")
