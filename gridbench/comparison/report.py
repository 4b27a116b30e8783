"""A Comparison as people read it: terminal tables, markdown, CSV, JSON and PNG plots."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from gridbench.comparison import account_report
from gridbench.comparison.pairing import ONE_OFF_IN_TRIAL, STEADY_TRIAL, WALL, Comparison, Pairing
from gridbench.comparison.statistics import Ratio, geometric_mean
from gridbench.page import plain_ticks
from gridbench.tables import Column, balanced, fitted
from gridbench.tracking import schema
from gridbench.tracking.records import config_key

FORMATS = ("table", "markdown", "csv", "json")
# Training-time metrics as tables and plots name them: (column, adjective).
TRAIN_LABELS = {schema.STEADY_EPOCH_S: ("steady s/epoch", "steady-state"), schema.FIT_S: ("fit s", "training")}


def train_label(comparison: Comparison) -> tuple[str, str]:
    metric = comparison.timings[0]
    return TRAIN_LABELS.get(metric, (metric, metric))


PLOTS = ("relative_time_cost.png", "speedup_per_config.png", "speedup_heatmap.png")


def num(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:.0f}"


def seconds(value: float) -> str:
    """A part of a trial in seconds, to the hundredth: '0' for what rounds to nothing (a later trial's one-off)."""
    return "0" if abs(value) < 0.005 else f"{value:.2f}"


def share(value: float | None) -> str:
    """A training share as a fraction, to two places ("0.42"); "-" for a search recorded before it."""
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _ratio(ratio: Ratio) -> str:
    if ratio.low is None:
        return f"{ratio.value:.3g}x (1 run)"
    flag = "" if ratio.significant else " n.s."
    return f"{ratio.value:.3g}x [{ratio.low:.3g}-{ratio.high:.3g}]{flag}"


def search_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    headers = ["search", "makespan s", "relative time", f"time to {comparison.metric} {num(comparison.target)}",
               "$/hour", "cost $", "relative cost", "training share", "failed"]  # fmt: skip
    rows = []
    for search, f in zip(comparison.searches, comparison.figures):
        reached = (
            "not reached" if comparison.target is not None and f.time_to_target_s is None else num(f.time_to_target_s)
        )
        rows.append(
            [search.label, num(f.makespan_s), num(f.relative_time), reached, num(f.price_per_hour),
             num(f.cost, 3), num(f.relative_cost), share(f.training_share), str(len(f.failed))]
        )  # fmt: skip
    return headers, rows


def config_rows(comparison: Comparison, pairing: Pairing) -> tuple[list[str], list[list[str]]]:
    """Each configuration at its steady cost, then the one-off parts its trials paid: the two add up to the wall."""
    train, (column, adjective) = comparison.timings[0], train_label(comparison)
    headers = ["configuration", "repeats", f"{column} (base, other)", f"{EPOCH_SPEEDUP[adjective]} [95% CI]",
               "trial s, steady (base, other)", "trial speedup [95% CI]", "cost ratio",
               "+ one-off in trial s (base, other)", "= trial wall s (base, other)"]  # fmt: skip
    rows = []
    for row in pairing.rows:
        marks = ["†" if first else "" for first in row.first_only]
        rows.append(
            [row.key, f"{row.repeats[0]}, {row.repeats[1]}",
             f"{num(row.baseline[train])}, {num(row.other[train])}",
             _ratio(row.speedup[train]),
             f"{num(row.baseline[STEADY_TRIAL])}{marks[0]}, {num(row.other[STEADY_TRIAL])}{marks[1]}",
             _ratio(row.speedup[STEADY_TRIAL]), num(row.cost_ratio),
             f"{seconds(row.baseline[ONE_OFF_IN_TRIAL])}, {seconds(row.other[ONE_OFF_IN_TRIAL])}",
             f"{num(row.baseline[WALL])}, {num(row.other[WALL])}"]
        )  # fmt: skip
    rows.append(
        ["geometric mean", "", "", f"{num(pairing.geomean_speedup[train])}x", "",
         f"{num(pairing.geomean_speedup[STEADY_TRIAL])}x", "", "", ""]
    )  # fmt: skip
    return headers, rows


# The per-configuration training figure's name: an epoch's speedup, or the workload's own (fit time).
EPOCH_SPEEDUP = {"steady-state": "epoch speedup", "training": "fit speedup"}


COST_RATIO = (
    "cost ratio = the baseline's cost / the other's cost of one trial of the configuration at its steady cost: "
    "each side's steady trial time x the $/hour of what one of its trials holds (its cores x the core price, plus "
    "its GPU share x the GPU's price); above 1: cheaper on the other side, below 1: cheaper on the baseline"
)
STEADY_NOTE = (
    "trial s, steady = a trial's wall time less what it paid once: its worker's start (imports, device set-up) and "
    "its program's first use (compiling or loading it); + one-off in trial = those parts; = trial wall s, as run. "
    "The trial speedup, the cost ratio and where each side won use the steady figures"
)


def speedup_line(comparison: Comparison, pairing: Pairing) -> str:
    """The pairing's speedups, each named for what it measures, and why they differ."""
    at_once = (comparison.baseline.metrics.get(schema.CONCURRENCY), pairing.other.metrics.get(schema.CONCURRENCY))
    trials = f"{num(at_once[0])} and {num(at_once[1])} trials at once" if None not in at_once else "as they ran"
    train, adjective = comparison.timings[0], train_label(comparison)[1]
    return (
        f"{pairing.other.label} against {comparison.baseline.label}: whole search as run "
        f"{num(pairing.speedup_as_run)}x (the makespans' ratio: the verdict's figure); the trials without the "
        f"one-off parts {account_report.x(pairing.speedup_steady)} (the accounts' steady cost, {trials}); per "
        f"configuration, one trial against one trial, geometric means: {EPOCH_SPEEDUP[adjective]} "
        f"{num(pairing.geomean_speedup[train])}x, trial speedup {num(pairing.geomean_speedup[STEADY_TRIAL])}x"
    )


def notes(comparison: Comparison) -> list[str]:
    """The detail under the tables, each line labelled; the verdict is not among them (it comes last)."""
    lines = []
    for pairing in comparison.pairings:
        lines.append(speedup_line(comparison, pairing))
        if pairing.cpu_faster:
            lines.append(f"CPU faster per trial (at steady cost) for: {_numbered(comparison, pairing.cpu_faster)}")
        if pairing.cpu_cheaper:
            lines.append(f"CPU cheaper per trial (at steady cost) for: {_numbered(comparison, pairing.cpu_cheaper)}")
        if any(any(r.first_only) for r in pairing.rows):
            lines.append(
                "†: every trial of this configuration was its worker's first; its steady figure is that trial's "
                "with the worker's start taken out"
            )
        if pairing.only_in_baseline or pairing.only_in_other:
            lines.append(
                f"not compared (in one search only): {'; '.join(pairing.only_in_baseline + pairing.only_in_other)}"
            )
            lines.append(
                "the two grids differ: whole-search figures (makespan, time to target, cost) cover each search's "
                "own grid, so only the per-configuration figures compare like with like"
            )
    for search, figures in zip(comparison.searches, comparison.figures):
        if figures.failed:
            lines.append(f"failed trials excluded from {search.label}: {'; '.join(figures.failed)}")
    for mismatch in comparison.mismatches:
        lines.append(f"MISMATCH (allowed): {mismatch}")
    for difference in comparison.environment_differences:
        lines.append(f"environment: {difference}")
    for difference in comparison.strategy_differences:
        lines.append(
            f"strategy: {difference}; a fused configuration's times are its equal share of its group's "
            f"(fused_with), so per-configuration speedups include what fusing saved"
        )
    if any(f.training_share is None for f in comparison.figures):
        lines.append("training share -: the search was recorded before gridbench measured it")
    lines.append(
        "training share = the search's epochs at their steady time / (makespan x trials at once): the rest is "
        "start-up, compiling, warm-up, evaluation and idle slots"
    )
    lines += [STEADY_NOTE, *account_report.projection_notes(comparison)]
    prices = comparison.prices
    gpu = ", ".join(
        f"{name} ${price}/h" if price is not None else f"{name} unpriced"
        for name, price in prices.get("gpu_hour", {}).items()
    )
    cpu = f"${prices.get('cpu_core_hour')}/core-hour"
    lines.append(f"prices (inputs, not measurements): {cpu}{', ' + gpu if gpu else ''}; from {prices.get('source')}")
    lines.append(
        "speedup = baseline time / other time; n.s.: the 95% interval includes 1; (1 run): no repeats, no interval"
    )
    lines.append(COST_RATIO)
    return lines


def markdown(comparison: Comparison) -> str:
    def table(headers, rows):
        out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        out += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
        return "\n".join(out)

    parts = [
        f"# {comparison.experiment}: {len(comparison.searches)} searches compared",
        "",
        *[f"**{v.text}**\n" for v in comparison.verdicts],
        table(*search_rows(comparison)),
    ]
    for pairing in comparison.pairings:
        parts += [
            "",
            f"## {pairing.other.label} against {comparison.baseline.label}",
            "",
            table(*config_rows(comparison, pairing)),
        ]
        projected = account_report.projection_rows(pairing)
        if projected:
            parts += ["", f"### Projected to other sizes ({pairing.other.label})", "", table(*projected)]
    accounts = account_report.account_rows(comparison)
    if accounts:
        parts += ["", "## Where the time went", "", table(*accounts)]
    parts += ["", *[f"- {line}" for line in notes(comparison)], ""]
    return "\n".join(parts)


def to_csv(comparison: Comparison) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    times = [f"{m}_{side}" for m in comparison.timings for side in ("baseline", "other")]
    ratios = [f"{m}_speedup{suffix}" for m in comparison.timings for suffix in ("", "_ci95_low", "_ci95_high")]
    figures = (*comparison.timings, STEADY_TRIAL)
    times = [f"{m}_{side}" for m in figures for side in ("baseline", "other")]
    ratios = [f"{m}_speedup{suffix}" for m in figures for suffix in ("", "_ci95_low", "_ci95_high")]
    writer.writerow(["baseline", "other", "number", "configuration", "repeats_baseline", "repeats_other", *times,
                     *ratios, "cost_ratio", "training_share_baseline", "training_share_other"])  # fmt: skip
    for i, pairing in enumerate(comparison.pairings, start=1):
        # The searches' shares, on each of their rows; empty where a search was recorded before them.
        shares = [comparison.figures[0].training_share, comparison.figures[i].training_share]
        for row in pairing.rows:
            times = [side[m] for m in figures for side in (row.baseline, row.other)]
            ratios = [getattr(row.speedup[m], part) for m in figures for part in ("value", "low", "high")]
            ids = [comparison.baseline.run_id, pairing.other.run_id]
            writer.writerow([*ids, row.number, row.key, *row.repeats, *times, *ratios, row.cost_ratio, *shares])
    return buffer.getvalue()


def render(comparison: Comparison, fmt: str) -> str:
    if fmt == "markdown":
        return markdown(comparison)
    if fmt == "csv":
        return to_csv(comparison)
    if fmt == "json":
        return json.dumps(comparison.to_dict(), indent=1, default=str)
    raise ValueError(fmt)


def columns(headers: list[str], rows: list[list[str]], keys: int = 1) -> list[Column]:
    """A table's headers and rows as terminal columns: the first `keys` identify a row; headers stack balanced."""
    return [
        Column(balanced(header), [row[i] for row in rows], key=i < keys, justify="left" if i < keys else "right")
        for i, header in enumerate(headers)
    ]


def config_numbers(comparison: Comparison) -> dict[str, int]:
    """Each compared configuration's number (#): the one the searches' own tables, the page and the JSON use."""
    return {row.key: row.number for pairing in comparison.pairings for row in pairing.rows}


def _numbered(comparison: Comparison, keys) -> str:
    numbers = config_numbers(comparison)
    return "; ".join(f"#{numbers[key]} {key}" if key in numbers else key for key in keys)


def varying_axes(comparison: Comparison) -> tuple[list[str], dict[str, str]]:
    """The grid axes whose value differs between compared configurations, and those of one value (axis -> value)."""
    configs = [row.config for pairing in comparison.pairings for row in pairing.rows]
    axes = sorted({axis for config in configs for axis in config})
    values = {axis: {str(config.get(axis, "")) for config in configs} for axis in axes}
    varying = [axis for axis in axes if len(values[axis]) > 1]
    return varying or axes, {axis: next(iter(v)) for axis, v in values.items() if len(v) == 1 and varying}


def config_columns(comparison: Comparison, pairing: Pairing) -> list[Column]:
    """config_rows as terminal columns: the configuration as its number (#) and the axes that vary, one column each."""
    headers, rows = config_rows(comparison, pairing)
    numbers, (axes, _) = config_numbers(comparison), varying_axes(comparison)
    configs = [row.config for row in pairing.rows]
    ids = [str(numbers[row.key]) for row in pairing.rows] + [GEOMEAN]
    keys = [Column("#", ids, key=True)]
    keys += [Column(axis, [str(c.get(axis, "")) for c in configs] + [""], key=True, justify="left") for axis in axes]
    return keys + columns(headers[1:], [row[1:] for row in rows], keys=0)


GEOMEAN = "geomean"  # the row of geometric means, in the # column


def terminal_tables(comparison: Comparison, width: int | None) -> list:
    """The whole searches, then each pairing's configurations: rich tables, each no wider than `width`."""
    headers, rows = search_rows(comparison)
    tables = fitted(f"{comparison.experiment}: whole searches", columns(headers, rows), width)
    fixed = varying_axes(comparison)[1]
    every = f"; every configuration: {config_key(fixed)}" if fixed else ""
    for pairing in comparison.pairings:
        found = config_columns(comparison, pairing)
        # Speedups first, then the times behind them, where the terminal splits the table.
        speedups = [c.header for c in found if "speedup" in c.header or c.header == balanced("cost ratio")]
        first = speedups + [c.header for c in found if "(base, other)" in c.header]
        title = f"{pairing.other.label} against {comparison.baseline.label}{every}"
        tables += fitted(title, found, width, first)
    accounts = account_report.account_rows(comparison)
    if accounts:
        tables += fitted("where each whole command went", columns(*accounts), width)
    for pairing in comparison.pairings:
        projected = account_report.projection_rows(pairing)
        if projected:
            title = f"projected: {pairing.other.label} against the base"
            tables += fitted(title, columns(*projected), width, ["speedup [95%]"])
    return tables


def print_table(console, comparison: Comparison) -> None:
    """The comparison in the terminal: tables that fit its width, no value cut, then the notes."""
    for table in terminal_tables(comparison, console.width):
        console.print(table)
    for line in notes(comparison):
        console.print(line, highlight=False)


def plot(comparison: Comparison, directory: Path) -> dict[str, Path]:
    """Writes the PNGs it can (a heatmap needs two grid axes); returns artifact name -> path."""
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, fig in figures(comparison).items():
        written[f"plots/{name}.png"] = directory / f"{name}.png"
        fig.savefig(written[f"plots/{name}.png"], dpi=110)
        plt.close(fig)
    return written


def figures(comparison: Comparison) -> dict:
    """The comparison's charts as matplotlib figures, by name: saved as PNG artifacts, or inline SVG in a page."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = {}

    labels = [s.label for s in comparison.searches]
    time = [f.relative_time or 0 for f in comparison.figures]
    cost = [f.relative_cost or 0 for f in comparison.figures]
    fig, ax = plt.subplots(figsize=(8, 1.8 + 0.6 * len(labels)), layout="constrained")
    y = range(len(labels))
    ax.barh([i + 0.2 for i in y], time, height=0.4, label="relative time (makespan)", color="#1f77b4")
    ax.barh([i - 0.2 for i in y], cost, height=0.4, label="relative cost", color="#e377c2")
    ax.set_yticks(list(y), labels)
    ax.axvline(1, color="grey", linewidth=0.8)
    ax.set_xlabel(f"relative to {comparison.baseline.label} (lower is better)")
    fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    ax.set_title(f"{comparison.experiment}: whole search")
    made["relative_time_cost"] = fig

    pairing = comparison.pairings[0]
    rows = pairing.rows
    if rows:
        fig, ax = plt.subplots(figsize=(8, 2.1 + 0.35 * len(rows)), layout="constrained")
        train, adjective = comparison.timings[0], train_label(comparison)[1]
        series = ((0.15, train, f"{adjective} time", "o"), (-0.15, STEADY_TRIAL, "trial at steady cost", "s"))
        for offset, metric, name, marker in series:
            ratios = [r.speedup[metric] for r in rows]
            lows = [r.value - (r.low if r.low is not None else r.value) for r in ratios]
            highs = [(r.high if r.high is not None else r.value) - r.value for r in ratios]
            positions = [i + offset for i in range(len(rows))]
            values = [r.value for r in ratios]
            ax.errorbar(values, positions, xerr=[lows, highs], fmt=marker, capsize=3, label=name)
        ax.set_yticks(range(len(rows)), [f"#{r.number} {r.key}" for r in rows], fontsize=7)
        ax.axvline(1, color="grey", linewidth=0.8)
        ax.set_xscale("log")
        plain_ticks(ax.xaxis)
        ax.set_xlabel("speedup = baseline time / other time (95% CI where repeated; 1 = no difference)")
        ax.set_title(f"{pairing.other.label}\nagainst {comparison.baseline.label}", fontsize=9)
        fig.legend(loc="outside lower center", ncol=2, fontsize=8, frameon=False)
        made["speedup_per_config"] = fig

    axes = [a for a in sorted({k for r in rows for k in r.config}) if len({r.config.get(a) for r in rows}) > 1]
    if len(axes) >= 2:
        x_axis, y_axis = axes[0], axes[1]
        xs = sorted({r.config[x_axis] for r in rows}, key=_sort_key)
        ys = sorted({r.config[y_axis] for r in rows}, key=_sort_key)
        grid = [[geometric_mean([r.speedup[comparison.timings[0]].value for r in rows
                                 if r.config[x_axis] == x and r.config[y_axis] == yv]) or float("nan")
                 for x in xs] for yv in ys]  # fmt: skip
        fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(xs), 1.4 + 0.7 * len(ys)), layout="constrained")
        image = ax.imshow(grid, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(xs)), xs)
        ax.set_yticks(range(len(ys)), ys)
        ax.set_xlabel(x_axis)
        ax.set_ylabel(y_axis)
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                # Dark text on viridis' light end (yellow), light text on its dark end: legible on both.
                shade = "black" if image.norm(value) > 0.55 else "white"
                ax.text(j, i, f"{value:.2g}x", ha="center", va="center", color=shade, fontsize=8)
        others = f"\n(geometric mean over {', '.join(axes[2:])})" if axes[2:] else ""
        ax.set_title(f"{train_label(comparison)[1]} speedup{others}", fontsize=9)
        fig.colorbar(image, ax=ax)
        made["speedup_heatmap"] = fig
    return made


def _sort_key(value: str):
    try:
        return (0, float(value))
    except ValueError:
        return (1, value)


def headline_metrics(comparison: Comparison) -> dict[str, float]:
    """The figures a comparison run shows in MLflow's run list; suffixed _1, _2... when several pairings."""
    headline = {}
    for i, pairing in enumerate(comparison.pairings, start=1):
        suffix = "" if len(comparison.pairings) == 1 else f"_{i}"
        for key, value in (
            (schema.MAKESPAN_SPEEDUP, pairing.makespan_speedup),
            (schema.GEOMEAN_TRAIN_SPEEDUP, pairing.geomean_speedup[comparison.timings[0]]),
            (schema.GEOMEAN_WALL_SPEEDUP, pairing.geomean_speedup[schema.TRIAL_WALL_S]),
            (schema.RELATIVE_COST, comparison.figures[i].relative_cost),
            (schema.CONFIGS_CPU_FASTER, float(len(pairing.cpu_faster))),
            (schema.CONFIGS_CPU_CHEAPER, float(len(pairing.cpu_cheaper))),
            (schema.BASELINE_TRAINING_SHARE, comparison.figures[0].training_share),
            (schema.OTHER_TRAINING_SHARE, comparison.figures[i].training_share),
        ):
            if value is not None:  # unpriced or unmeasured: left out rather than logged as 0
                headline[key + suffix] = value
    return headline


def comparison_tags(comparison: Comparison) -> dict[str, str]:
    tags = {f"{schema.SEARCH_PREFIX}{i}": s.label for i, s in enumerate(comparison.searches)}
    tags[schema.PRICES_SOURCE] = str(comparison.prices.get("source"))
    if comparison.mismatches:
        tags[schema.MISMATCHES] = "; ".join(comparison.mismatches)
    return tags
