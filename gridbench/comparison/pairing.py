"""Compare searches: speedups per configuration and per search, with intervals, and cost.

    searches (read back from MLflow) -> checks -> pairing by configuration -> statistics -> Comparison

The first search is the baseline; every speedup is baseline time / other time, so
2.0 means the other search's device took half as long. Per configuration, the
interval is a 95% Welch t-interval on log times from the repeats, turned back into
a ratio (a ratio's natural scale is logarithmic); with one repeat on either side
there is no interval, and the table says so. Nothing here reads or writes MLflow.
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

from gridbench import account
from gridbench.comparison import projection, spread, verdict
from gridbench.comparison.prices import PriceTable
from gridbench.comparison.statistics import Ratio, geometric_mean, ratio_with_interval
from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.records import config_numbers
from gridbench.tracking.stored_searches import SearchRun, TrialRun

# Facts that must agree for a comparison to mean anything (refused unless allowed).
MUST_MATCH = (schema.SPEC_NAME, schema.DATASET, schema.DATA_SYNTHETIC, schema.MODEL, schema.BACKEND, schema.METRIC)
# Facts worth showing when they differ (the device always does: it is what is compared).
ENVIRONMENT = (
    schema.HOST,
    schema.CPU_MODEL,
    schema.CPU_CORES_USABLE,
    schema.GPU_COUNT,
    f"{schema.GPU_PREFIX}0.name",
    f"{schema.GPU_PREFIX}0.driver",
)
WALL = schema.TRIAL_WALL_S
# A trial's wall time less what it paid once (its worker's start, its program's first use): what another trial
# of the configuration costs. Derived here from the account's split (gridbench.account.trial_shares), not stored.
STEADY_TRIAL = "steady_trial_s"
ONE_OFF_IN_TRIAL = "one_off_in_trial_s"


def timings(search: SearchRun) -> tuple[str, str]:
    """The training-time metric its workload reports (steady_epoch_s, fit_s), and the trial's wall time."""
    return (search.timing_train, WALL)


def time_to_target(search: SearchRun, metric: str, target: float | None, mode: str) -> float | None:
    """Seconds from the search's start until its best result so far reached `target`; None if never."""
    if target is None:
        return None
    reached = (lambda v: v >= target) if mode == "max" else (lambda v: v <= target)
    for trial in sorted((t for t in search.trials if t.finished and not t.diverged), key=lambda t: t.ended_s):
        if metric in trial.metrics and reached(trial.metrics[metric]):
            return trial.ended_s
    return None


@dataclass(frozen=True)
class ConfigRow:
    key: str
    config: Mapping[str, str]
    repeats: tuple[int, int]  # finished repeats in the baseline and the other search
    baseline: Mapping[str, float]  # geometric means of each of the comparison's timings
    other: Mapping[str, float]
    speedup: Mapping[str, Ratio]  # per timing
    cost_ratio: float | None  # baseline cost / other cost of one trial at its steady cost
    run_ids: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())  # the trials' MLflow runs: baseline's, other's
    # Whether every trial of the configuration was its worker's first (baseline, other): its steady figure is
    # then that trial's with the worker's start taken out, not a later trial's.
    first_only: tuple[bool, bool] = (False, False)
    number: int = 0  # the configuration's number, the same in every table (gridbench.tracking.records)

    def to_dict(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "config": dict(self.config),
            "first_only": list(self.first_only),
            "repeats": list(self.repeats),
            "baseline": dict(self.baseline),
            "other": dict(self.other),
            "speedup": {k: v.to_dict() for k, v in self.speedup.items()},
            "cost_ratio": self.cost_ratio,
        }


@dataclass(frozen=True)
class Pairing:
    """One search against the baseline."""

    other: SearchRun
    rows: tuple[ConfigRow, ...]
    only_in_baseline: tuple[str, ...]
    only_in_other: tuple[str, ...]
    geomean_speedup: Mapping[str, float | None]
    makespan_speedup: float | None
    # Where one side is a CPU: the configurations whose trial, at its steady cost, the CPU ran faster or cheaper.
    cpu_faster: tuple[str, ...]
    cpu_cheaper: tuple[str, ...]
    # Without the one-off parts (start-up, compiling, workers' start, end): the trials at their steady cost.
    speedup_steady: float | None = None
    projection: projection.Projection | None = None

    @property
    def speedup_as_run(self) -> float | None:
        """The makespans' ratio, one-off parts and all: what this search's size showed."""
        return self.makespan_speedup

    # Where the baseline won, whatever the devices: a shorter trial wall time, a lower cost per trial.
    baseline_faster: tuple[str, ...] = ()
    baseline_cheaper: tuple[str, ...] = ()


@dataclass(frozen=True)
class SearchFigures:
    makespan_s: float | None
    time_to_target_s: float | None
    price_per_hour: float | None
    cost: float | None
    relative_time: float | None  # to the baseline
    relative_cost: float | None
    failed: tuple[str, ...]
    # Steady training / (makespan x concurrency), as the search's parent run holds it; None for a run
    # written before schema 3 (never estimated from its trials).
    training_share: float | None = None
    account: account.Account | None = None  # None: recorded before schema 6


@dataclass
class Comparison:
    experiment: str
    metric: str
    mode: str
    target: float | None
    searches: tuple[SearchRun, ...]
    figures: tuple[SearchFigures, ...]
    pairings: tuple[Pairing, ...]
    mismatches: tuple[str, ...]
    environment_differences: tuple[str, ...]
    timings: tuple[str, str] = (schema.STEADY_EPOCH_S, WALL)  # training-time metric, wall-time metric
    prices: Mapping[str, Any] = field(default_factory=dict)
    strategy_differences: tuple[str, ...] = ()  # how the searches ran (execution), where they differ
    verdicts: tuple = ()  # one gridbench.comparison.verdict.Verdict per pairing: the answer, in one sentence

    @property
    def baseline(self) -> SearchRun:
        return self.searches[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment": self.experiment,
            "metric": self.metric,
            "mode": self.mode,
            "target": self.target,
            "timings": list(self.timings),
            "baseline": self.baseline.run_id,
            "searches": [
                {
                    "run_id": s.run_id,
                    "label": s.label,
                    "device": s.tags.get(schema.DEVICE),
                    "backend": s.tags.get(schema.BACKEND),
                    **{k: v for k, v in vars(f).items() if k != "account"},
                    "account": f.account.to_dict() if f.account else None,
                    "whole_command_s": f.account.whole_command_s if f.account else None,
                }
                for s, f in zip(self.searches, self.figures)
            ],
            "pairings": [
                {
                    "baseline": self.baseline.run_id,
                    "other": p.other.run_id,
                    "makespan_speedup": p.makespan_speedup,
                    "speedup_as_run": p.speedup_as_run,
                    "speedup_steady": p.speedup_steady,
                    "projection": p.projection.to_dict() if p.projection else None,
                    "geomean_speedup": dict(p.geomean_speedup),
                    "configurations": {row.key: row.to_dict() for row in p.rows},
                    "verdict": v.to_dict() if v else None,
                    "only_in_baseline": list(p.only_in_baseline),
                    "only_in_other": list(p.only_in_other),
                    "cpu_faster": list(p.cpu_faster),
                    "cpu_cheaper": list(p.cpu_cheaper),
                    "baseline_faster": list(p.baseline_faster),
                    "baseline_cheaper": list(p.baseline_cheaper),
                }
                for p, v in itertools.zip_longest(self.pairings, self.verdicts)
            ],
            "verdict": self.verdicts[0].to_dict() if self.verdicts else None,
            "verdicts": [v.to_dict() for v in self.verdicts],
            "mismatches": list(self.mismatches),
            "environment_differences": list(self.environment_differences),
            "strategy_differences": list(self.strategy_differences),
            "prices": dict(self.prices),
            # The first pair's projection, row by row (each pairing holds its own).
            "projection": [r.to_dict() for r in self.pairings[0].projection.rows]
            if self.pairings and self.pairings[0].projection
            else [],
        }


# Parameters that change how a model trains, not what: each device may run its own.
HOW_NOT_WHAT = ("train_loop",)


def check_comparable(searches: Sequence[SearchRun], allow_mismatch: bool) -> tuple[list[str], list[str]]:
    """Every mismatch and environment difference, in words; mismatches refuse unless allowed."""
    if len(searches) < 2:
        raise UserError("compare needs at least two searches; give two run ids or --experiment NAME")
    seen = set()
    for search in searches:
        if search.run_id in seen:
            raise UserError(f"run {search.run_id} is given twice; a search compared with itself says nothing")
        seen.add(search.run_id)
    base = searches[0]
    mismatches, differences = [], []
    for other in searches[1:]:
        for key in MUST_MATCH:
            mine, theirs = base.tags.get(key), other.tags.get(key)
            if mine != theirs:
                mismatches.append(f"{key}: {mine} ({base.label}) vs {theirs} ({other.label})")
        a, b = base.fixed_params, other.fixed_params
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                found = f"param {key}: {a.get(key)} ({base.label}) vs {b.get(key)} ({other.label})"
                (differences if key in HOW_NOT_WHAT else mismatches).append(found)
        prefixed = (schema.VERSION_PREFIX, schema.ENV_PREFIX)
        for key in ENVIRONMENT + tuple(sorted(k for k in set(base.tags) | set(other.tags) if k.startswith(prefixed))):
            if base.tags.get(key) != other.tags.get(key):
                differences.append(f"{key}: {base.tags.get(key, '-')} vs {other.tags.get(key, '-')}")
    if mismatches and not allow_mismatch:
        raise UserError(
            f"the searches differ in what they measure ({'; '.join(mismatches)}); compare like with like, "
            f"or pass --allow-mismatch"
        )
    return mismatches, differences


# How a search ran, not what it measured: shown where it differs, never refused.
STRATEGY = (schema.EXECUTION,)


def strategy_differences(searches: Sequence[SearchRun]) -> list[str]:
    """'execution: fused (label) vs trials (label)' for each search whose strategy differs from the baseline's,
    and where one compiled its programs ahead (gridbench.gridsearch.precompile) and another did not."""
    base, found = searches[0], []
    for other in searches[1:]:
        for key in STRATEGY:
            mine, theirs = base.tags.get(key), other.tags.get(key)
            if mine != theirs:
                found.append(f"{key}: {mine} ({base.label}) vs {theirs} ({other.label})")
        mine, theirs = _compiled_ahead(base), _compiled_ahead(other)
        if mine != theirs:
            found.append(f"programs compiled ahead: {mine} ({base.label}) vs {theirs} ({other.label})")
        mine, theirs = _cache_state(base), _cache_state(other)
        if mine != theirs:
            found.append(f"compile cache: {mine} ({base.label}) vs {theirs} ({other.label})")
    return found


def _cache_state(search: SearchRun) -> str:
    """'persistent, empty at the start' or 'per search': enough to tell a warm search from a first one."""
    setting, held = search.tags.get(schema.COMPILE_CACHE, "?"), search.tags.get(schema.COMPILE_CACHE_STATE, "")
    if setting != "persistent" or not held:
        return setting
    return f"persistent, {'empty' if held == 'empty' else 'warm'} at the start"


def _compiled_ahead(search: SearchRun) -> str:
    processes = int(search.metrics.get(schema.PRECOMPILE_PROCESSES, 0))
    if processes:
        return f"by {processes} process(es) while Ray started"
    if search.metrics.get(schema.PROGRAMS_PRECOMPILE_LOADED):  # an earlier search left every program ready
        return "none needed (every program ready in the cache, loaded in its first trial)"
    return "no (in each program's first trial)"


def _finished_by_config(
    search: SearchRun, metrics: tuple[str, str]
) -> dict[str, list[tuple[TrialRun, account.TrialShare]]]:
    """Each configuration's finished trials, with the account's split of their wall time."""
    shares = account.trial_shares([(t.worker, t.started_s, t.ended_s, t.metrics) for t in search.trials], metrics[0])
    by_key: dict[str, list[tuple[TrialRun, account.TrialShare]]] = {}
    for trial, share in zip(search.trials, shares):
        if trial.finished and all(trial.metrics.get(m, 0) > 0 for m in metrics):
            by_key.setdefault(trial.key, []).append((trial, share))
    return by_key


def _trial_price(search: SearchRun, prices: PriceTable) -> float | None:
    """$/hour of what one trial holds: its cores and its GPU share."""
    return prices.per_hour(
        search.tags,
        cores=float(search.tags.get(schema.CPUS_PER_TRIAL, 0) or 0),
        gpus=_float(search.tags.get(schema.GPUS_PER_TRIAL)),
    )


def search_price(search: SearchRun, prices: PriceTable) -> float | None:
    """$/hour of what the whole search held: the cores Ray was given and the GPUs it used."""
    return prices.per_hour(
        search.tags,
        cores=float(search.tags.get(schema.CPU_CORES_USABLE, 0) or 0),
        gpus=_float(search.tags.get(schema.GPUS_USED)),
    )


def _measured(value: float | None) -> float | None:
    """A recorded figure, or None where the run lacks it or recorded NaN (nothing to divide by)."""
    return None if value is None or math.isnan(value) else value


def _steady_speedup(base: account.Account | None, other: account.Account | None) -> float | None:
    if base is None or other is None or not other.steady_s:
        return None
    return base.steady_s / other.steady_s


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 0.0
    except ValueError:
        return 0.0


def compare(
    searches: Sequence[SearchRun],
    prices: PriceTable,
    target: float | None = None,
    allow_mismatch: bool = False,
    project: Mapping[str, int] | None = None,
    history: Mapping[str, Sequence[SearchRun]] | None = None,
) -> Comparison:
    """Pairs each search with the first; `project` is a size to project the pairs to (projection.parse_sizes);
    `history` holds earlier runs of each search (by run id), for the run-to-run spread of the intervals."""
    mismatches, differences = check_comparable(searches, allow_mismatch)
    base = searches[0]
    metric, mode = base.tags[schema.METRIC], base.tags[schema.METRIC_MODE]
    if target is None and base.tags.get(schema.METRIC_TARGET):
        target = float(base.tags[schema.METRIC_TARGET])
    if base.tags[schema.DATA_SYNTHETIC] == "true":
        target = None  # random labels: no accuracy to wait for
    figures = _search_figures(searches, prices, metric, target, mode)
    spreads = [spread.run_to_run(s, (history or {}).get(s.run_id, ())) for s in searches]
    numbers = config_numbers(t.config for s in searches for t in s.trials)
    pairings = tuple(
        _pairing(searches, index, figures, spreads, prices, project or {}, numbers) for index in range(1, len(searches))
    )
    comparison = Comparison(
        experiment=base.tags.get(schema.SPEC_NAME, "?"),
        metric=metric,
        mode=mode,
        target=target,
        searches=tuple(searches),
        figures=tuple(figures),
        pairings=pairings,
        mismatches=tuple(mismatches),
        environment_differences=tuple(dict.fromkeys(differences)),
        timings=timings(base),
        prices=prices.describe([s.tags for s in searches]),
        strategy_differences=tuple(strategy_differences(searches)),
    )
    comparison.verdicts = tuple(verdict.of_pairing(comparison, p) for p in pairings)
    return comparison


def _pairing(searches, index, figures, spreads, prices, asked, numbers) -> Pairing:
    """The search at `index` against the baseline: its configurations at their steady cost, and its projection."""
    base, other = searches[0], searches[index]
    measured = timings(base)
    base_trials, other_trials = _finished_by_config(base, measured), _finished_by_config(other, measured)
    rows = _config_rows(base_trials, other_trials, measured, _trial_price(base, prices), _trial_price(other, prices))
    rows = sorted((replace(row, number=numbers[row.key]) for row in rows), key=lambda row: row.number)
    cpu_faster, cpu_cheaper = _cpu_side(base, other, rows)
    base_makespan, other_makespan = base.metrics.get(schema.MAKESPAN_S), other.metrics.get(schema.MAKESPAN_S)
    prices_per_hour = (figures[0].price_per_hour, figures[index].price_per_hour)
    return Pairing(
        other=other,
        rows=tuple(rows),
        only_in_baseline=tuple(sorted(set(base_trials) - set(other_trials))),
        only_in_other=tuple(sorted(set(other_trials) - set(base_trials))),
        geomean_speedup={m: geometric_mean([r.speedup[m].value for r in rows]) for m in (*measured, STEADY_TRIAL)},
        makespan_speedup=base_makespan / other_makespan if base_makespan and other_makespan else None,
        cpu_faster=tuple(cpu_faster),
        cpu_cheaper=tuple(cpu_cheaper),
        speedup_steady=_steady_speedup(figures[0].account, figures[index].account),
        projection=projection.project((base, other), prices_per_hour, (spreads[0], spreads[index]), asked),
        baseline_faster=tuple(r.key for r in rows if r.speedup[STEADY_TRIAL].value < 1),
        baseline_cheaper=tuple(r.key for r in rows if r.cost_ratio is not None and r.cost_ratio < 1),
    )


def _search_figures(
    searches: Sequence[SearchRun], prices: PriceTable, metric: str, target: float | None, mode: str
) -> list[SearchFigures]:
    """Each search's own figures: makespan, time to the target, price and cost, relative to the first."""
    base = searches[0]
    figures = []
    base_cost = None
    for search in searches:
        makespan = search.metrics.get(schema.MAKESPAN_S)
        price = search_price(search, prices)
        cost = makespan / 3600 * price if makespan is not None and price is not None else None
        if search is base:
            base_cost = cost
        base_makespan = base.metrics.get(schema.MAKESPAN_S)
        figures.append(
            SearchFigures(
                makespan_s=makespan,
                time_to_target_s=time_to_target(search, metric, target, mode),
                price_per_hour=price,
                cost=cost,
                relative_time=makespan / base_makespan if makespan and base_makespan else None,
                relative_cost=cost / base_cost if cost is not None and base_cost else None,
                failed=tuple(sorted(f"{t.key} #{t.repeat}" for t in search.trials if not t.finished)),
                training_share=_measured(search.metrics.get(schema.TRAINING_SHARE)),
                account=account.Account.from_metrics(search.metrics),
            )
        )
    return figures


def _config_rows(base_trials, other_trials, measured, base_trial_price, other_trial_price) -> list[ConfigRow]:
    """One row per configuration both searches finished: means at steady cost, speedups with their intervals,
    cost ratio. `*_trials` map a configuration to its finished trials and their account shares."""
    rows = []
    for key in sorted(set(base_trials) & set(other_trials)):
        a, b = base_trials[key], other_trials[key]
        figures = (*measured, STEADY_TRIAL)
        speedup = {m: ratio_with_interval(_values(a, m), _values(b, m)) for m in figures}
        means_a = {m: geometric_mean(_values(a, m)) for m in figures}
        means_b = {m: geometric_mean(_values(b, m)) for m in figures}
        for means, found in ((means_a, a), (means_b, b)):
            means[ONE_OFF_IN_TRIAL] = statistics.fmean(share.one_off_s for _, share in found)
        cost_ratio = None
        if base_trial_price and other_trial_price:
            cost_ratio = (means_a[STEADY_TRIAL] * base_trial_price) / (means_b[STEADY_TRIAL] * other_trial_price)
        ids = (tuple(t.run_id for t, _ in a if t.run_id), tuple(t.run_id for t, _ in b if t.run_id))
        first_only = tuple(all(share.worker_first for _, share in found) for found in (a, b))
        rows.append(
            ConfigRow(key, a[0][0].config, (len(a), len(b)), means_a, means_b, speedup, cost_ratio, ids, first_only)
        )
    return rows


def _values(found: Sequence[tuple[TrialRun, account.TrialShare]], metric: str) -> list[float]:
    """A configuration's trials' values of a recorded metric, or of their steady cost (STEADY_TRIAL)."""
    if metric == STEADY_TRIAL:
        # A trial of nothing but one-off parts (a share rounded to 0) keeps its wall time: never divide by 0.
        return [share.steady_s if share.steady_s > 0 else t.metrics[WALL] for t, share in found]
    return [t.metrics[metric] for t, _ in found]


def _cpu_side(base: SearchRun, other: SearchRun, rows: Sequence[ConfigRow]) -> tuple[list[str], list[str]]:
    """Where one side is a CPU: the configurations the CPU ran faster, and those it ran cheaper."""
    base_is_cpu, other_is_cpu = base.tags.get(schema.DEVICE) == "cpu", other.tags.get(schema.DEVICE) == "cpu"
    cpu_faster, cpu_cheaper = [], []
    if base_is_cpu != other_is_cpu:
        for row in rows:
            # A speedup below 1 means the baseline was faster; flip when the CPU is the other side.
            wall = row.speedup[STEADY_TRIAL].value
            if (wall < 1) == base_is_cpu:
                cpu_faster.append(row.key)
            if row.cost_ratio is not None and (row.cost_ratio < 1) == base_is_cpu:
                cpu_cheaper.append(row.key)
    return cpu_faster, cpu_cheaper
