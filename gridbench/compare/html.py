"""A comparison as one self-contained HTML page: one file, readable offline, charts as inline SVG.

Headline figures first, then where the time goes (the phases of a trial, per search:
why a whole search gains less than an epoch), the per-configuration speedups with
their intervals, where the CPU won, each search's environment, and the runs in MLflow.
"""

from __future__ import annotations

import html
import io
from typing import Sequence

from gridbench.compare import report
from gridbench.compare.pairing import Comparison
from gridbench.tracking import schema
from gridbench.tracking.read import SearchRun

# A trial's time in the order it is spent: (label, metrics summed into it).
PHASES = (
    ("start-up (import, data, model)", (schema.IMPORT_S, schema.SETUP_S)),
    ("compile / warm-up epoch", (schema.WARMUP_EPOCH_S, "warmup_s")),
    ("training", ()),  # fit_s less the warm-up: the timed epochs, or a kernel group's solve and Gram share
    ("evaluation", (schema.EVAL_S,)),
    ("other (in the trial, outside these)", ()),
)
ENVIRONMENT = (
    (schema.DEVICE, "device"),
    (schema.BACKEND, "backend"),
    (schema.HOST, "host"),
    (schema.CPU_MODEL, "CPU"),
    (schema.CPU_CORES_USABLE, "cores"),
    (f"{schema.GPU_PREFIX}0.name", "GPU"),
    (f"{schema.GPU_PREFIX}0.driver", "driver"),
    (f"{schema.GPU_PREFIX}0.cuda_driver", "CUDA"),
    (f"{schema.VERSION_PREFIX}keras", "Keras"),
    (f"{schema.VERSION_PREFIX}jax", "JAX"),
    (f"{schema.VERSION_PREFIX}tensorflow-cpu", "TensorFlow (CPU)"),
    (f"{schema.VERSION_PREFIX}torch", "PyTorch"),
    (f"{schema.VERSION_PREFIX}ray", "Ray"),
    (f"{schema.VERSION_PREFIX}mlflow", "MLflow"),
)
STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.headline { display: flex; gap: 1em; flex-wrap: wrap; }
.figure { border: 1px solid #ccc; border-radius: 6px; padding: 0.6em 1em; min-width: 11em; }
.figure b { display: block; font-size: 1.6em; }
.chart svg { max-width: 100%; height: auto; }
.note { color: #555; font-size: 0.9em; }
"""


def phase_seconds(search: SearchRun) -> dict[str, float]:
    """Mean seconds per finished trial in each phase (see PHASES)."""
    finished = [t for t in search.trials if t.finished]
    if not finished:
        return {label: 0.0 for label, _ in PHASES}
    sums = dict.fromkeys((label for label, _ in PHASES), 0.0)
    for trial in finished:
        m = trial.metrics
        start_up = m.get(schema.IMPORT_S, 0.0) + m.get(schema.SETUP_S, 0.0)
        warmup = m.get(schema.WARMUP_EPOCH_S, m.get("warmup_s", 0.0))
        training = max(0.0, m.get(schema.FIT_S, 0.0) - m.get(schema.WARMUP_EPOCH_S, 0.0))
        evaluation = m.get(schema.EVAL_S, 0.0)
        other = max(0.0, m.get(schema.TRIAL_WALL_S, 0.0) - start_up - warmup - training - evaluation)
        for (label, _), value in zip(PHASES, (start_up, warmup, training, evaluation, other)):
            sums[label] += value
    return {label: value / len(finished) for label, value in sums.items()}


def phase_figure(comparison: Comparison):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [s.label for s in comparison.searches]
    phases = [phase_seconds(s) for s in comparison.searches]
    fig, ax = plt.subplots(figsize=(9, 1.4 + 0.6 * len(labels)))
    left = [0.0] * len(labels)
    for label, _ in PHASES:
        values = [p[label] for p in phases]
        ax.barh(range(len(labels)), values, left=left, label=label)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("seconds per trial (mean over finished trials)")
    ax.set_title(f"{comparison.experiment}: where a trial's time goes")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.5), ncol=3, fontsize=8)
    fig.tight_layout()
    return fig


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: the SVG goes inline


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _figure(title: str, value: str, note: str = "") -> str:
    return f'<div class="figure">{html.escape(title)}<b>{html.escape(value)}</b>{html.escape(note)}</div>'


def _chart(name: str, fig) -> str:
    return f'<div class="chart" id="chart-{name}">{_svg(fig)}</div>'


def run_links(comparison: Comparison, tracking_uri: str, ui_base: str | None) -> list[tuple[str, str, str | None]]:
    """(label, run id, address or None) for each search: an address where the store is a server we can name."""
    base = ui_base or (tracking_uri.rstrip("/") if tracking_uri.startswith(("http://", "https://")) else None)
    return [(s.label, s.run_id, f"{base}/#/runs/{s.run_id}" if base else None) for s in comparison.searches]


def page(
    comparison: Comparison, tracking_uri: str, comparison_run_id: str | None = None, ui_base: str | None = None
) -> str:
    """The whole page, as text; it loads nothing from anywhere."""
    adjective = report.train_label(comparison)[1]
    parts = [f"<h1>{html.escape(comparison.experiment)}: {len(comparison.searches)} searches compared</h1>"]
    parts.append(f'<p class="note">baseline: {html.escape(comparison.baseline.label)}; speedup = baseline time / '
                 f"other time (above 1: the other search was faster)</p>")  # fmt: skip

    parts.append("<h2>Headline</h2>")
    for i, pairing in enumerate(comparison.pairings, start=1):
        figures = comparison.figures[i]
        per_epoch = report.num(pairing.geomean_speedup[comparison.timings[0]])
        cards = [
            _figure(
                "whole search (makespan)", f"{report.num(pairing.makespan_speedup)}x", _faster(pairing.makespan_speedup)
            ),
            _figure(f"per epoch ({adjective}, geomean)", f"{per_epoch}x"),
            _figure("per trial (wall, geomean)", f"{report.num(pairing.geomean_speedup[schema.TRIAL_WALL_S])}x"),
            _figure("relative time", report.num(figures.relative_time)),
            _figure("relative cost", report.num(figures.relative_cost), " (prices are inputs)"),
        ]
        if comparison.target is not None:
            reached = figures.time_to_target_s
            value = "not reached" if reached is None else f"{report.num(reached)} s"
            cards.append(_figure(f"time to {comparison.metric} {comparison.target:g}", value))
        parts.append(f'<h3>{html.escape(pairing.other.label)}</h3><div class="headline">{"".join(cards)}</div>')
    parts.append(_table(*report.search_rows(comparison)))

    charts = report.figures(comparison)
    parts.append("<h2>Where the time goes</h2>")
    parts.append('<p class="note">A trial\'s time, phase by phase: what a whole search pays besides training.</p>')
    parts.append(_chart("phases", phase_figure(comparison)))
    if "relative_time_cost" in charts:
        parts.append(_chart("relative_time_cost", charts.pop("relative_time_cost")))

    for pairing in comparison.pairings:
        parts.append(f"<h2>Per configuration: {html.escape(pairing.other.label)}</h2>")
        parts.append(_table(*report.config_rows(comparison, pairing)))
    for name, fig in charts.items():
        parts.append(_chart(name, fig))

    parts.append("<h2>Where the CPU won</h2>")
    won = []
    for pairing in comparison.pairings:
        won += [f"faster (trial wall time): {key}" for key in pairing.cpu_faster]
        won += [f"cheaper per trial: {key}" for key in pairing.cpu_cheaper]
    parts.append(_list(won) if won else "<p>Nowhere: every configuration was faster and cheaper on the GPU side.</p>")
    parts.append("<h2>Notes</h2>" + _list(report.notes(comparison)))

    parts.append("<h2>Environment</h2>")
    parts.append(_table(["", *(s.label for s in comparison.searches)], environment_rows(comparison.searches)))

    parts.append("<h2>Runs in MLflow</h2>")
    links = []
    for label, run_id, address in run_links(comparison, tracking_uri, ui_base):
        target = f'<a href="{html.escape(address)}">{run_id}</a>' if address else run_id
        links.append(f"<li>{html.escape(label)}: {target}</li>")
    if comparison_run_id:
        links.append(f"<li>this comparison: {html.escape(comparison_run_id)}</li>")
    parts.append(f"<ul>{''.join(links)}</ul>")
    parts.append(f'<p class="note">store: {html.escape(tracking_uri)}; browse it with '
                 f"<code>python -m gridbench ui --tracking-uri {html.escape(tracking_uri)}</code></p>")  # fmt: skip
    title = f"gridbench: {comparison.experiment}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body>{''.join(parts)}</body></html>\n"
    )


def _faster(speedup: float | None) -> str:
    if speedup is None or speedup == 1:
        return ""
    return " faster" if speedup > 1 else " (slower)"


def _list(lines: Sequence[str]) -> str:
    return "<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>"


def environment_rows(searches: Sequence[SearchRun]) -> list[list[str]]:
    return [[label, *(s.tags.get(tag, "-") for s in searches)] for tag, label in ENVIRONMENT]
