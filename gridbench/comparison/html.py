"""Searches and comparisons as self-contained HTML pages: one file each, readable offline.

A comparison's page has the headline figures first, then where the time goes (the
phases of a trial, per search: why a whole search gains less than an epoch), the
per-configuration speedups with their intervals (each row linked to MLflow's compare
view of its trials), where the baseline won, each search's environment, and the runs
in MLflow with their compare view. A search's page has its own figures, phases,
trials and environment.
"""

from __future__ import annotations

import html
from typing import Sequence

from gridbench import account, page
from gridbench.comparison import account_report, report
from gridbench.comparison.pairing import STEADY_TRIAL, Comparison, Pairing
from gridbench.tracking import commands, schema, ui
from gridbench.tracking.records import config_numbers
from gridbench.tracking.stored_searches import SearchRun

# A trial's time in the order it is spent.
PHASES = (
    "trial start-up (import, data, model)",
    "compile / warm-up epoch",
    "training",  # fit less the warm-up: the timed epochs, or a kernel group's solve and Gram share
    "evaluation",
    "other (in the trial, outside these)",
)
# Each phase in the colour of the account's part it belongs to (gridbench.account.PART_COLOURS).
PHASE_PARTS = dict(zip(PHASES, ("worker_start_s", "warmup_s", "training_s", "eval_s", "trial_overhead_s")))
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


def phase_seconds(search: SearchRun) -> dict[str, float]:
    """Mean seconds per finished trial in each of PHASES."""
    finished = [t for t in search.trials if t.finished]
    sums = dict.fromkeys(PHASES, 0.0)
    for trial in finished:
        m = trial.metrics
        start_up = m.get(schema.IMPORT_S, 0.0) + m.get(schema.SETUP_S, 0.0)
        warmup = m.get(schema.WARMUP_EPOCH_S, m.get("warmup_s", 0.0))  # kernel_ridge calls its own warmup_s
        training = max(0.0, m.get(schema.FIT_S, 0.0) - m.get(schema.WARMUP_EPOCH_S, 0.0))
        evaluation = m.get(schema.EVAL_S, 0.0)
        other = max(0.0, m.get(schema.TRIAL_WALL_S, 0.0) - start_up - warmup - training - evaluation)
        for phase, value in zip(PHASES, (start_up, warmup, training, evaluation, other)):
            sums[phase] += value
    return {phase: value / max(1, len(finished)) for phase, value in sums.items()}


def phase_figure(searches: Sequence[SearchRun], experiment: str):
    """Each search's mean trial, phase by phase, as stacked bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [s.label for s in searches]
    phases = [phase_seconds(s) for s in searches]
    fig, ax = plt.subplots(figsize=(9, 2.2 + 0.6 * len(labels)), layout="constrained")
    left = [0.0] * len(labels)
    for phase in PHASES:
        values = [p[phase] for p in phases]
        colour = account.PART_COLOURS[PHASE_PARTS[phase]]
        ax.barh(range(len(labels)), values, left=left, label=phase, color=colour)
        left = [a + b for a, b in zip(left, values)]
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("seconds per trial (mean over finished trials)")
    ax.set_title(f"{experiment}: where a trial's time goes")
    fig.legend(loc="outside lower center", ncol=3, fontsize=8, frameon=False)  # below the axis label
    return fig


def comparison_page(
    comparison: Comparison, tracking_uri: str, comparison_run_id: str | None = None, ui_base: str | None = None
) -> str:
    """The comparison's page, as text; it loads nothing from anywhere."""
    adjective = report.train_label(comparison)[1]
    parts = [f"<h1>{html.escape(comparison.experiment)}: {len(comparison.searches)} searches compared</h1>"]
    parts += [f'<p class="verdict"><b>{html.escape(v.text)}</b></p>' for v in comparison.verdicts]
    parts.append(page.note(f"baseline: {comparison.baseline.label}; speedup = baseline time / other time"))

    parts.append(page.heading("Headline"))
    for i, pairing in enumerate(comparison.pairings, start=1):
        figures = comparison.figures[i]
        makespan = pairing.makespan_speedup
        cards = [
            page.card("whole search as run (makespans)", f"{report.num(makespan)}x", _faster(makespan)),
            page.card(f"per epoch ({adjective}, geomean)", f"{report.num(_geomean(comparison, pairing, 0))}x"),
            page.card("per trial at steady cost (geomean)", f"{report.num(pairing.geomean_speedup[STEADY_TRIAL])}x"),
            page.card("relative time", report.num(figures.relative_time)),
            page.card("relative cost", report.num(figures.relative_cost), " (prices are inputs)"),
            page.card(
                "training share",
                report.share(figures.training_share),
                f" ({comparison.baseline.label}: {report.share(comparison.figures[0].training_share)})",
            ),
        ]
        if comparison.target is not None:
            reached = figures.time_to_target_s
            value = "not reached" if reached is None else f"{report.num(reached)} s"
            cards.append(page.card(f"time to {comparison.metric} {comparison.target:g}", value))
        parts.append(page.heading(pairing.other.label, 3) + f'<div class="headline">{"".join(cards)}</div>')
    parts.append(page.table(*report.search_rows(comparison)))

    charts = report.figures(comparison)
    parts.append(page.heading("Where the time goes"))
    parts += account_section(comparison)
    parts.append(page.note("A trial's time, phase by phase: what a whole search pays besides training."))
    parts.append(page.chart("phases", phase_figure(comparison.searches, comparison.experiment)))
    if "relative_time_cost" in charts:
        parts.append(page.chart("relative_time_cost", charts.pop("relative_time_cost")))

    base = ui.ui_base(tracking_uri, ui_base)
    for pairing in comparison.pairings:
        parts.append(page.heading(f"Per configuration: {pairing.other.label}"))
        parts.append(config_table(comparison, pairing, base))
        parts.append(page.note(report.COST_RATIO))
    parts += [page.chart(name, fig) for name, fig in charts.items()]
    parts += projection_section(comparison)
    parts.append(baseline_won(comparison))
    # The account's and the projection's lines where their sections above show them: each line once on the page.
    speedups = {report.speedup_line(comparison, pairing) for pairing in comparison.pairings}
    shown = speedups if account_report.account_rows(comparison) else set()
    if any(account_report.projection_rows(pairing) for pairing in comparison.pairings):
        shown |= set(account_report.projection_notes(comparison))
    parts.append(page.heading("Notes") + page.bullets([n for n in report.notes(comparison) if n not in shown]))
    parts.append(environment_section(comparison.searches))
    extra = f"this comparison: {comparison_run_id}" if comparison_run_id else ""
    parts.append(runs_section(comparison.searches, tracking_uri, ui_base, extra, compare=True))
    return page.document(f"gridbench: {comparison.experiment}", parts)


def account_section(comparison: Comparison) -> list[str]:
    """Each search's whole command, part by part, as a stacked bar and a table (none before schema 6)."""
    rows = account_report.account_rows(comparison)
    if rows is None:
        return [page.note("No account: these searches were recorded before gridbench kept one.")]
    lines = [report.speedup_line(comparison, pairing) for pairing in comparison.pairings]
    return [page.chart("account", account_report.account_figure(comparison)), page.table(*rows), page.bullets(lines)]


def projection_section(comparison: Comparison) -> list[str]:
    """The pair at other sizes: a model's projection, labelled as one, with its charts and break-even points."""
    parts = []
    for pairing in comparison.pairings:
        rows = account_report.projection_rows(pairing)
        if rows is None:
            continue
        parts.append(page.heading(f"At other sizes, projected: {pairing.other.label}"))
        parts.append(page.table(*rows))
        if pairing.projection.curves:
            parts.append(page.chart("projection", account_report.projection_figure(pairing)))
    if parts:
        parts.append(page.bullets(account_report.projection_notes(comparison)))
    return parts


def config_table(comparison: Comparison, pairing: Pairing, base: str) -> str:
    """The per-configuration table, each row with a link to MLflow's compare view of its trials."""
    headers, rows = report.config_rows(comparison, pairing)
    for row, config in zip(rows, pairing.rows):
        runs = [*config.run_ids[0], *config.run_ids[1]]
        experiments = [comparison.baseline.experiment_id, pairing.other.experiment_id]
        row.append(page.link("compare", ui.compare_runs_url(base, runs, experiments)) if runs else "")
    rows[-1].append("")  # the geometric means
    return page.table([*headers, "trials in MLflow"], rows)


def baseline_won(comparison: Comparison) -> str:
    """The configurations where the baseline was faster or cheaper, for any two devices."""
    found = []
    for pairing in comparison.pairings:
        against = f"against {pairing.other.label}"
        found += [f"{against}: faster per trial (at steady cost): {key}" for key in pairing.baseline_faster]
        found += [f"{against}: cheaper per trial (at steady cost): {key}" for key in pairing.baseline_cheaper]
    heading = page.heading(f"Where the baseline won ({comparison.baseline.label})")
    nowhere = page.note("Nowhere: no configuration was faster or cheaper there.")
    return heading + (page.bullets(found) if found else nowhere)


def search_page(search: SearchRun, tracking_uri: str, ui_base: str | None = None) -> str:
    """One search's page: its totals, where its trials' time went, every trial, its environment."""
    name = search.tags.get(schema.SPEC_NAME, "?")
    m = search.metrics
    parts = [f"<h1>{html.escape(name)}: {html.escape(search.label)}</h1>", page.heading("Headline")]
    last = " (last session)" if m.get(schema.SESSIONS, 1) > 1 else ""  # a resumed search: that session's figure
    cards = [
        *_makespan_cards(m),
        page.card(
            "trials finished",
            f"{report.num(m.get(schema.TRIALS_FINISHED))} of {report.num(m.get(schema.TRIALS_TOTAL))}",
        ),
        page.card("at once", report.num(m.get(schema.CONCURRENCY))),
        page.card("overhead ratio" + last, report.num(m.get(schema.OVERHEAD_RATIO))),
        page.card("training share" + last, report.share(m.get(schema.TRAINING_SHARE))),
        page.card("first trial after" + last, f"{report.num(m.get(schema.TIME_TO_FIRST_TRIAL_S))} s"),
    ]
    if schema.BEST_METRIC in m:
        cards.append(page.card(f"best {search.tags.get(schema.METRIC, '')}", report.num(m[schema.BEST_METRIC])))
    parts.append(f'<div class="headline">{"".join(cards)}</div>')
    parts.append(page.heading("Where the time goes"))
    parts += search_account_section(search)
    parts.append(page.note("A trial's time, phase by phase (the mean finished trial):"))
    parts.append(page.chart("phases", phase_figure([search], name)))
    parts.append(page.heading("Trials"))
    shown = (search.tags.get(schema.METRIC, ""), search.timing_train, schema.TRIAL_WALL_S)
    numbers = config_numbers(trial.config for trial in search.trials)
    rows = [
        [str(numbers[trial.key]), trial.key, str(trial.repeat), trial.status,
         *(report.num(trial.metrics.get(metric)) for metric in shown), trial.device or "-"]
        for trial in sorted(search.trials, key=lambda t: (numbers[t.key], t.repeat))
    ]  # fmt: skip
    parts.append(page.table(["#", "configuration", "repeat", "status", *shown, "device"], rows))
    parts.append(environment_section([search]))
    parts.append(runs_section([search], tracking_uri, ui_base))
    return page.document(f"gridbench: {name}", parts)


def search_account_section(search: SearchRun) -> list[str]:
    """Where the search's whole command went, part by part (none for a search recorded before the account)."""
    parts = account.Account.from_metrics(search.metrics)
    if parts is None:
        return [page.note("No account: this search was recorded before gridbench kept one.")]
    rows = [[label, f"{parts.parts()[part]:.2f}"] for part, label in account.PART_LABELS.items()]
    rows.append(["whole command", f"{parts.whole_command_s:.2f}"])
    note = (
        "The whole command, from its start to its exit, in parts that add up to it; start-up ends as the first "
        "trial starts (the headline's 'first trial after'). The trials' parts are their slot-time / trials at once."
    )
    return [
        page.note(note),
        page.chart("account", account_report.accounts_figure([(search.label, parts)])),
        page.table(["where the time went", "s"], rows),
    ]


def _makespan_cards(m) -> list[str]:
    """The whole search's makespan; a resumed search's every session's added up, and its last session's apart."""
    sessions = int(m.get(schema.SESSIONS, 1))
    if sessions <= 1:
        return [page.card("makespan", f"{report.num(m.get(schema.MAKESPAN_S))} s")]
    last = page.card("last session's makespan", f"{report.num(m.get(schema.MAKESPAN_S))} s")
    if schema.SEARCH_MAKESPAN_S not in m:  # resumed before gridbench added the sessions up
        return [last]
    return [page.card(f"makespan, {sessions} sessions", f"{report.num(m[schema.SEARCH_MAKESPAN_S])} s"), last]


def environment_section(searches: Sequence[SearchRun]) -> str:
    rows = [[label, *(s.tags.get(tag, "-") for s in searches)] for tag, label in ENVIRONMENT]
    return page.heading("Environment") + page.table(["", *(s.label for s in searches)], rows)


COMPARE_VIEW = "MLflow's compare view of these searches"


def runs_section(
    searches: Sequence[SearchRun], tracking_uri: str, ui_base: str | None, extra: str = "", compare: bool = False
) -> str:
    """Each search's run in MLflow, and (comparing) MLflow's compare view of them: links to the UI.

    A store that is a server is its own UI; for any other, the links name `gridbench ui` on its default port.
    """
    base = ui.ui_base(tracking_uri, ui_base)
    items = [f"<li>{html.escape(s.label)}: {page.link(s.run_id, f'{base}/#/runs/{s.run_id}')}</li>" for s in searches]
    if compare:
        view = ui.compare_runs_url(base, [s.run_id for s in searches], [s.experiment_id for s in searches])
        items.append(f"<li>side by side: {page.link(COMPARE_VIEW, view)}</li>")
    if extra:
        items.append(f"<li>{html.escape(extra)}</li>")
    browse = f"store: {tracking_uri}; browse it with: {commands.ui_command(tracking_uri)}"
    if base != tracking_uri.rstrip("/") and ui_base is None:
        browse += f" (the links expect it on {base})"
    return page.heading("Runs in MLflow") + f"<ul>{''.join(items)}</ul>" + page.note(browse)


def _geomean(comparison: Comparison, pairing, timing: int) -> float | None:
    return pairing.geomean_speedup[comparison.timings[timing]]


def _faster(speedup: float | None) -> str:
    if speedup is None or speedup == 1:
        return ""
    return " faster" if speedup > 1 else " (slower)"


def report_page(tracking_uri: str, run_id: str) -> tuple[str, str]:
    """(kind, page) for a run: a comparison's or a scale's page as it was logged, or a search's made now."""
    from gridbench.errors import UserError
    from gridbench.page import REPORT_PAGE
    from gridbench.tracking import stored_searches

    kind = stored_searches.run_kind(tracking_uri, run_id)
    if kind == "search":
        return kind, search_page(stored_searches.read_search(tracking_uri, run_id), tracking_uri)
    if kind not in ("comparison", "scale"):
        raise UserError(f"run {run_id} is a {kind or 'non-gridbench'} run; give a search's, comparison's or scale's")
    text = stored_searches.artifact_text(tracking_uri, run_id, REPORT_PAGE)
    if text is None:
        raise UserError(f"{kind} run {run_id} has no {REPORT_PAGE} (recorded before gridbench wrote one); run it again")
    return kind, text
