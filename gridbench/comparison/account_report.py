"""The account and the projection of a Comparison as tables and lines (report.py prints them)."""

from __future__ import annotations

from gridbench import account
from gridbench.comparison.pairing import Comparison, Pairing
from gridbench.comparison.projection import Row


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def short_label(index: int) -> str:
    """'base', then 'other', 'other 2', ...: the account's columns stay narrow."""
    return "base" if index == 0 else ("other" if index == 1 else f"other {index}")


def account_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """Where each search's whole command went, part by part, searches side by side; None if none has an account."""
    accounts = [f.account for f in comparison.figures]
    if not any(accounts):
        return None
    headers = ["where the time went (s)", *[short_label(i) for i in range(len(accounts))]]
    rows = [
        [label, *[_s(a.parts()[part]) if a else "-" for a in accounts]] for part, label in account.PART_LABELS.items()
    ]
    rows.append(["whole command", *[_s(a.whole_command_s) if a else "-" for a in accounts]])
    rows.append(["  of which paid once per search", *[_s(a.one_off_s) if a else "-" for a in accounts]])
    rows.append(["  the trials at their steady cost", *[_s(a.steady_s) if a else "-" for a in accounts]])
    rows.append(["makespan (Tune's fit)", *[_s(f.makespan_s) for f in comparison.figures]])
    return headers, rows


def projection_rows(pairing: Pairing) -> tuple[list[str], list[list[str]]] | None:
    if pairing.projection is None or not pairing.projection.rows:
        return None
    headers = ["projected size", "epochs", "configs", "repeats", "base s", "other s", "speedup [95%]", "cost ratio"]
    return headers, [_row(r) for r in pairing.projection.rows]


def _row(row: Row) -> list[str]:
    label = row.label + (" (measured)" if row.measured else "")
    size = [str(row.epochs), str(row.configs), str(row.repeats)]
    if row.why_not:
        return [label, *size, "-", "-", "not projected", "-"]
    base, other = row.makespan_s
    speedup = row.speedup.text()
    cost = "-" if row.cost_ratio is None else f"{row.cost_ratio:.3g}"
    return [label, *size, _s(base.value), _s(other.value), speedup, cost]


def projection_notes(comparison: Comparison) -> list[str]:
    lines = []
    for pairing in comparison.pairings:
        projection = pairing.projection
        if projection is None:
            continue
        if projection.why_not:
            lines.append(f"projection: not made ({projection.why_not})")
            continue
        for row in projection.rows:
            if row.why_not:
                lines.append(f"projection, {row.label}: not projected ({row.why_not})")
        for line in projection.break_even:
            lines.append(f"break-even, {pairing.other.label}: {line}")
        if projection.rows:
            lines.append(_interval_note(projection))
    if any(p.projection and p.projection.rows for p in comparison.pairings):
        lines.append(
            "projection: a model, not a measurement. Start-up, compiling, workers' start and end are held as "
            "measured; each trial's overhead and warm-up scale with the trials, its epochs with the epochs "
            "(makespans in s). It assumes the same mix of configurations (programs already compiled) and each trial "
            "keeping its resources; cost ratio = base cost / other cost at the price table (above 1: the other is "
            "cheaper)"
        )
    return lines


def _interval_note(projection) -> str:
    if projection.no_interval:
        return f"projection's intervals: none ({projection.no_interval})"
    described = [s.describe() for s in projection.spreads]
    spreads = (
        f"both: {described[0]}"
        if len(set(described)) == 1
        else "; ".join(f"{short_label(i)}: {text}" for i, text in enumerate(described))
    )
    return (
        "projection's intervals (95%): the trials' spread (trial to trial, epoch to epoch) and the spread between "
        f"runs of the same search, which one run cannot see ({spreads})"
    )


def account_figure(comparison: Comparison):
    """Each search's whole command as one stacked bar, part by part (gridbench.account)."""
    shown = [(s.label, f.account) for s, f in zip(comparison.searches, comparison.figures) if f.account]
    return accounts_figure(shown)


def accounts_figure(shown):
    """(label, Account) pairs as stacked bars, one colour per part (account.PART_COLOURS), the legend below."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 2.4 + 0.5 * len(shown)), layout="constrained")
    left = [0.0] * len(shown)
    for part, label in account.PART_LABELS.items():
        values = [a.parts()[part] for _, a in shown]
        ax.barh(range(len(shown)), values, left=left, label=label, color=account.PART_COLOURS[part])
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(shown)), [label for label, _ in shown])
    ax.set_xlabel("seconds of the whole command")
    ax.set_title("where each whole command went")
    fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    return fig


def projection_figure(pairing: Pairing):
    """The projected speedup along epochs and along configurations, the measured size marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from gridbench.page import plain_ticks

    curves = pairing.projection.curves
    fig, axes = plt.subplots(1, len(curves), figsize=(4.5 * len(curves), 4.0), squeeze=False, layout="constrained")
    for ax, (axis, points) in zip(axes[0], curves.items()):
        xs = [x for x, _ in points]
        ax.fill_between(xs, [s.low for _, s in points], [s.high for _, s in points], alpha=0.25, label="95% interval")
        ax.plot(xs, [s.value for _, s in points], "o-", label="projected speedup")
        ax.plot(xs[:1], [points[0][1].value], "k*", markersize=12, label="measured size")
        ax.set_xscale("log")
        plain_ticks(ax.xaxis)
        plain_ticks(ax.yaxis)
        ax.set_xlabel(f"{axis} (the rest as run)")
        ax.set_ylabel("whole-search speedup (makespans)")
        ax.grid(True, alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"{pairing.other.label}: projected, not measured")
    return fig
