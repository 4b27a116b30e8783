"""A scale result as a terminal table, Markdown/CSV/JSON and a PNG scaling curve."""

from __future__ import annotations

import csv
import io
import json
import math
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from gridbench import account
from gridbench.page import REPORT_PAGE
from gridbench.scale.scale_runner import ScaleResult, projected_counts
from gridbench.tracking import commands, record_summary, schema

# (header, ScaleRow field, format)
COLUMNS = (
    ("{unit}", "count", "{:d}"),
    ("at once", "concurrency", "{:d}"),
    ("trials", "trials", "{:d}"),
    ("makespan s", "makespan_s", "{:.1f}"),
    ("trials/hour", "throughput_per_h", "{:.0f}"),
    ("speedup", "speedup", "{:.2f}x"),
    ("efficiency", "efficiency", "{:.0%}"),
    ("steady efficiency", "efficiency_steady", "{:.0%}"),
    ("Amdahl efficiency", "efficiency_amdahl", "{:.0%}"),
    ("training share", "training_share", "{:.2f}"),
    ("trial wall s (median)", "trial_wall_median_s", "{:.2f}"),
    ("{train} (median)", "train_median_s", "{:.4g}"),
    ("setup s (median)", "setup_median_s", "{:.2f}"),
    ("first trial after s", "first_trial_s", "{:.1f}"),
    ("idle s", "idle_s", "{:.1f}"),
)


def _unit(result: ScaleResult) -> str:
    return "GPUs" if result.request.resource == "gpu" else "cores"


def _headers(result: ScaleResult) -> list[str]:
    return [h.format(unit=_unit(result), train=result.train_metric) for h, _, _ in COLUMNS]


def _cells(result: ScaleResult) -> list[list[str]]:
    return [[_cell(fmt, getattr(row, field)) for _, field, fmt in COLUMNS] for row in result.rows]


def _cell(fmt: str, value) -> str:
    """NaN (a figure with nothing to divide by: no slot time) shows as "-", not "nan"."""
    return "-" if isinstance(value, float) and math.isnan(value) else fmt.format(value)


def title(result: ScaleResult) -> str:
    mode = "one trial data-parallel over all of them" if result.request.data_parallel else "independent trials"
    labels = ", ".join(f"{k} {v}" for k, v in result.labels.items())
    return f"{result.spec.name} over {_unit(result)} {','.join(map(str, result.request.counts))}: {mode} ({labels})"


def notes(result: ScaleResult) -> list[str]:
    base = result.rows[0].count if result.rows else 1
    return [
        f"speedup = makespan at {base} / makespan at N; efficiency = speedup / (N / {base}); "
        "idle s = makespan less the trials' summed wall time spread over the trials that could run at once "
        "(Ray and worker start, queueing, recording); training share = epochs at their steady time / (makespan x "
        "trials at once), as each count's search run records it; steady efficiency: the same from the searches' "
        "steady cost, without start-up, compiling, workers' start and end (the account below); Amdahl efficiency: "
        f"predicted from the {base} count's account, if only its steady part (its trials) divided",
        f"scale id {result.scale_id}; one MLflow search run per count, tagged scale.id",
        *_order_note(result, base),
    ]


def _order_note(result: ScaleResult, base: int) -> list[str]:
    """How the counts after the first ordered their trials, where they did not keep the grid's order."""
    if not result.order_plans:
        return []
    note = (
        f"after the {base} count, each count shares its trials out over its slots by their epochs and evaluation at "
        f"the {base} count, so that the slots end together, and starts them as each slot frees "
        f"({'; '.join(result.order_plans)})"
    )
    if result.rows and result.rows[0].concurrency > 1:
        note += (
            f"; the {base} count ran several trials at once in the grid's order, so the speedups hold the order's gain"
        )
    return [note]


def account_table(result: ScaleResult) -> Table | None:
    """Where each count's whole command went, part by part (gridbench.account); None if no count has an account."""
    if not any(row.account for row in result.rows):
        return None
    table = Table(title=f"where each count's whole command went (s), at 1..N {_unit(result)}")
    table.add_column("part")
    for row in result.rows:
        table.add_column(str(row.count), justify="right")
    for part, label in account.PART_LABELS.items():
        table.add_row(label, *[f"{row.account[part]:.1f}" if row.account else "-" for row in result.rows])
    wholes = [f"{sum(row.account.values()):.1f}" if row.account else "-" for row in result.rows]
    table.add_row("whole command", *wholes)
    return table


def projection_table(result: ScaleResult) -> Table:
    """Makespan and efficiency at 1, 2, 4, 8 (and the measured counts) by Amdahl's law, measured ones beside."""
    unit = _unit(result)
    table = Table(title=f"projected by Amdahl's law from {result.rows[0].count} {unit} (a model; measured beside)")
    for header in (unit, "projected makespan s", "projected efficiency", "measured makespan s", "measured efficiency"):
        table.add_column(header, justify="right")
    for row in projected_counts(result.rows):
        measured = row["measured_makespan_s"] is not None
        table.add_row(
            str(row["count"]),
            f"{row['projected_makespan_s']:.1f}",
            f"{row['projected_efficiency']:.0%}",
            f"{row['measured_makespan_s']:.1f}" if measured else "not measured",
            f"{row['measured_efficiency']:.0%}" if measured else "-",
        )
    return table


def print_table(console: Console, result: ScaleResult) -> None:
    table = Table(title=title(result))
    for header in _headers(result):
        table.add_column(header, justify="right")
    for cells in _cells(result):
        table.add_row(*cells)
    console.print(table)
    accounts = account_table(result)
    if accounts is not None:
        console.print(accounts)
        console.print(projection_table(result))
    for line in notes(result):
        console.print(line, highlight=False)


def render(result: ScaleResult, fmt: str) -> str:
    if fmt == "json":
        return json.dumps(
            {
                "experiment": result.spec.name,
                "scale_id": result.scale_id,
                "resource": result.request.resource,
                "data_parallel": result.request.data_parallel,
                "train_metric": result.train_metric,
                "labels": result.labels,
                "rows": [row.to_dict() for row in result.rows],
                "projected": projected_counts(result.rows) if result.rows and result.rows[0].account else [],
            },
            indent=2,
        )
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow([field for _, field, _ in COLUMNS] + ["run_id"])
        for row in result.rows:
            values = row.to_dict()
            writer.writerow(["" if values[field] is None else values[field] for _, field, _ in COLUMNS] + [row.run_id])
        return out.getvalue()
    if fmt == "markdown":
        headers = _headers(result)
        lines = [f"**{title(result)}**", "", "| " + " | ".join(headers) + " |", "|" + "---:|" * len(headers)]
        lines += ["| " + " | ".join(cells) + " |" for cells in _cells(result)]
        return "\n".join(lines + [""] + [f"- {line}" for line in notes(result)]) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def plot(result: ScaleResult, path: Path) -> Path:
    """Writes the scaling curve as a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def figure(result: ScaleResult):
    """Speedup against the count, with ideal (linear) scaling for reference, and efficiency."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    counts = [row.count for row in result.rows]
    base = counts[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.6), layout="constrained")
    left.plot(counts, [c / base for c in counts], "--", color="grey", label="ideal (linear)")
    left.plot(counts, [row.speedup for row in result.rows], "o-", label="measured (makespan)")
    left.set_xlabel(_unit(result))
    left.set_ylabel(f"speedup over {base} {_unit(result)}")
    left.set_xticks(counts)
    right.plot(counts, [100 * row.efficiency for row in result.rows], "o-", label="parallel efficiency")
    if not any(math.isnan(row.efficiency_amdahl) for row in result.rows):
        right.plot(counts, [100 * row.efficiency_amdahl for row in result.rows], "x--", label="Amdahl (predicted)")
    right.plot(counts, [100 * row.training_share for row in result.rows], "s-", label="training share")
    right.axhline(90, color="grey", linewidth=0.8, linestyle=":")
    right.set_ylim(0, 110)
    right.set_xticks(counts)
    right.set_xlabel(_unit(result))
    right.set_ylabel("%")
    handles = [h for ax in (left, right) for h in ax.get_legend_handles_labels()[0]]
    # One legend below both panels: clear of their curves and labels.
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(title(result), fontsize=9)
    return fig


def page(result: ScaleResult, tracking_uri: str) -> str:
    """The scale result as one self-contained HTML page: the figures, the curve against ideal, the table."""
    from gridbench import page as html_page

    largest = result.rows[-1] if result.rows else None
    cards = []
    if largest is not None:
        cards = [
            html_page.card(f"speedup at {largest.count} {_unit(result)}", f"{largest.speedup:.2f}x"),
            html_page.card("parallel efficiency", f"{largest.efficiency:.0%}"),
            html_page.card("training share", _cell("{:.2f}", largest.training_share)),
            html_page.card("trials/hour", f"{largest.throughput_per_h:.0f}"),
        ]
    runs = [f"{row.count} {_unit(result)}: search run {row.run_id}" for row in result.rows]
    parts = [
        html_page.heading(title(result), 1),
        f'<div class="headline">{"".join(cards)}</div>',
        html_page.chart("scaling", figure(result)),
        html_page.table(_headers(result), _cells(result)),
        html_page.heading("Notes") + html_page.bullets(notes(result)),
        html_page.heading("Runs in MLflow") + html_page.bullets(runs),
        html_page.note(f"store: {tracking_uri}; browse it with: {commands.ui_command(tracking_uri)}"),
    ]
    return html_page.document(f"gridbench: scale {result.spec.name}", parts)


def scale_metrics(result: ScaleResult) -> dict[str, float]:
    """Each count's figures, named <figure>_<count> (MLflow metrics are flat)."""
    metrics = {}
    for row in result.rows:
        for key in schema.SCALE_FIGURES:
            value = getattr(row, key)
            if not math.isnan(value):  # unmeasurable: left out rather than logged
                metrics[f"{key}_{row.count}"] = value
    return metrics


def scale_tags(result: ScaleResult) -> dict[str, str]:
    request = result.request
    return {
        schema.SCALE_ID: result.scale_id,
        f"{schema.SCALE_PREFIX}resource": request.resource,
        f"{schema.SCALE_PREFIX}counts": ",".join(map(str, request.counts)),
        f"{schema.SCALE_PREFIX}data_parallel": str(request.data_parallel).lower(),
        schema.SCALE_RUNS: ",".join(row.run_id for row in result.rows),
        **{f"{schema.SCALE_PREFIX}{k}": v for k, v in result.labels.items()},
    }


def run_name(result: ScaleResult) -> str:
    request = result.request
    return f"scale {result.spec.name} {request.resource} {','.join(map(str, request.counts))}" + (
        " data-parallel" if request.data_parallel else ""
    )


def write_files(result: ScaleResult, directory: Path, tracking_uri: str) -> dict[str, Path]:
    """The curve, the three table formats and the HTML page; returns artifact name -> path."""
    files = {"scaling.png": plot(result, directory / "scaling.png")}  # plot() makes the directory
    for fmt, name in (("markdown", "scale.md"), ("csv", "scale.csv"), ("json", "scale.json")):
        (directory / name).write_text(render(result, fmt))
        files[name] = directory / name
    files[REPORT_PAGE] = directory / REPORT_PAGE
    files[REPORT_PAGE].write_text(page(result, tracking_uri), encoding="utf-8")
    return files


def record(result: ScaleResult, tracking_uri: str, out_dir: Path | str | None = None) -> str:
    """Logs the scale summary run to MLflow, linked to each count's search; returns its run id.

    The files go to `out_dir` when given (and stay there), else to a directory removed once logged.
    """
    with tempfile.TemporaryDirectory(prefix="gridbench-scale-") as scratch:
        files = write_files(result, Path(out_dir) if out_dir else Path(scratch), tracking_uri)
        run_ids = [row.run_id for row in result.rows]
        return record_summary(
            tracking_uri,
            result.spec.name,
            "scale",
            run_name(result),
            run_ids,
            scale_metrics(result),
            scale_tags(result),
            files,
        )
