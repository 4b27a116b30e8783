"""What a compared pair would show at another size: a projection from the searches' accounts.

    account (one-off parts) + trials' per-trial costs -> makespan at (epochs, configs, repeats, concurrency)

The model: a search of n trials, c at once, E epochs each, takes

    whole(n, E, c) = one-off + n / c x mean over trials of (overhead + warm-up + E x epoch)

The one-off parts (start-up, compiling, the workers' start, the end) are held as measured;
each trial's overhead (its share of the gaps between trials included) and warm-up scale
with the trials, its epochs with the epochs. At the measured size the model returns the
measured account exactly. It assumes the larger grid has the same mix of configurations
(more learning rates, more repeats: programs already compiled) and that each trial keeps
its resources. A projection is labelled as one.

The interval adds up, as variances, the spread the run shows and the spread it cannot:

- trial to trial: the standard error of the mean trial cost, widened to Student's t for
  the number of trials (fewer than MIN_TRIALS trials: no interval, and the reason);
- epoch to epoch: each trial's steady epochs' standard error, on the epochs' part;
- run to run: how much the same search moves between runs on the same machine
  (gridbench.comparison.spread: earlier runs in the store, or a measured floor), on the
  trials' pace and on the one-off parts.

A speedup's interval adds the two sides' relative variances on the log scale.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gridbench import account
from gridbench.comparison.spread import Spread
from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.stored_searches import SearchRun

KEYS = ("epochs", "configs", "repeats", "concurrency")
ASKED = "asked (--project)"
MIN_TRIALS = 3  # fewer trials say nothing about their spread: no interval
Z95 = 1.959964
SPEEDUP_GOAL = 10.0  # the break-even point reported beside "cheaper": a GPU search 10x faster


def parse_sizes(text: str | None, max_trials: int = 10_000) -> dict[str, int]:
    """--project epochs=50,configs=200,repeats=3: the size asked for, checked."""
    if not text:
        return {}
    sizes = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if key not in KEYS:
            raise UserError(
                f"--project {item.strip()!r}: unknown size; use {', '.join(KEYS)} (e.g. epochs=50,configs=200)"
            )
        try:
            number = int(value)
        except ValueError:
            number = 0
        if not sep or number <= 0:
            raise UserError(f"--project {item.strip()!r}: {key} takes a positive whole number, e.g. {key}=10")
        sizes[key] = number
    if sizes.get("epochs") == 1:
        raise UserError("--project epochs=1: a search needs at least 2 epochs (the first is warm-up)")
    trials = sizes.get("configs", 1) * sizes.get("repeats", 1)
    if trials > max_trials:
        raise UserError(f"--project: {trials} trials is more than --max-trials {max_trials}; project a smaller search")
    return sizes


@dataclass(frozen=True)
class Model:
    """One search, ready to project: its one-off parts, its trials' per-trial costs, its size."""

    search: SearchRun
    one_off_s: float
    makespan_outside_s: float  # whole command less makespan: start-up and end outside Tune's fit
    trials: tuple[account.PerTrial, ...]
    epochs: int  # per configuration; 0: the workload has none
    configs: int
    repeats: int
    concurrency: int
    fused: bool
    packed: bool
    price_per_hour: float | None
    spread: Spread  # run to run, which one run cannot see
    # Ray trials per configuration and repeat: 1, or less where a fused group or an inner axis trains several.
    units_per_trial: float = 1.0
    epoch_rel_se: float = 0.0  # the trials' steady epoch time: its relative standard error, typical over trials
    within_config: tuple[float, int] = (0.0, 0)  # repeats' relative spread of their training time, its freedom

    def trial_costs(self, epochs: int) -> list[float]:
        """Each measured trial's cost at `epochs` epochs: its overhead, its warm-up and its steady epochs."""
        return [t.overhead_s + t.warmup_s + t.epoch_s * (epochs if self.epochs else 1) for t in self.trials]

    def whole_at(self, mean_cost, configs: int, repeats: int, concurrency: int):
        """The whole command with trials of `mean_cost` (a number, or a numpy array of resampled means)."""
        return self.one_off_s + configs * repeats * self.units_per_trial / concurrency * mean_cost

    def whole_s(self, epochs: int, configs: int, repeats: int, concurrency: int) -> float:
        costs = self.trial_costs(epochs)
        return self.whole_at(sum(costs) / len(costs), configs, repeats, concurrency)

    def makespan_s(self, *size) -> float:
        return self.whole_s(*size) - self.makespan_outside_s

    def sd_at(self, epochs: int, configs: int, repeats: int, concurrency: int) -> float | None:
        """The makespan's standard deviation at this size, seconds: trial to trial (a configuration's repeats),
        epoch to epoch, run to run; None with fewer than MIN_TRIALS trials."""
        n = len(self.trials)
        if n < MIN_TRIALS:
            return None
        from scipy.stats import t as student

        scale = configs * repeats * self.units_per_trial / concurrency
        costs = self.trial_costs(epochs)
        training = scale * sum(trial.epoch_s * (epochs if self.epochs else 1) for trial in self.trials) / n
        # A configuration's trials differ by chance; different configurations differ by design (the same mix
        # is projected), so only the spread within configurations counts, widened to Student's t.
        within, dof = self.within_config
        widen = student.ppf(0.975, dof) / Z95 if dof else 1.0
        trials = training * within / math.sqrt(n) * widen
        epochs_part = training * self.epoch_rel_se / math.sqrt(n)
        pace = scale * sum(costs) / n * self.spread.pace
        return math.sqrt(trials**2 + epochs_part**2 + pace**2 + self.spread.one_off_s**2)

    def price_at(self, concurrency: int) -> float | None:
        """$/hour at `concurrency` trials at once: each trial keeps its resources."""
        return None if self.price_per_hour is None else self.price_per_hour * concurrency / self.concurrency


def model_of(search: SearchRun, price_per_hour: float | None, spread: Spread) -> Model | str:
    """The search's model, or why it cannot be projected."""
    parts = account.Account.from_metrics(search.metrics)
    if parts is None:
        return f"{search.label}: recorded before gridbench kept an account (schema 6); run it again to project it"
    failed = [t for t in search.trials if not t.finished]
    if failed:
        return (
            f"{search.label}: {len(failed)} trial(s) did not finish; a projection needs every trial's costs "
            f"(finish them with `gridbench search ... --resume {search.run_id}`)"
        )
    timings = account.timings_of(
        [(t.worker, t.started_s, t.ended_s, t.metrics) for t in search.trials], search.timing_train
    )
    if len(timings) < 2:
        return f"{search.label}: one trial cannot tell its own costs from the workers' start; run at least 2"
    slots = max(1, min(int(search.metrics.get(schema.CONCURRENCY, 1)), len(timings)))
    trials, _, _ = account.per_trial(timings)
    gaps = max(0.0, parts.trial_overhead_s - sum(t.overhead_s for t in trials) / slots)
    makespan = search.metrics.get(schema.MAKESPAN_S, parts.whole_command_s)
    configs = len({t.key for t in search.trials})
    repeats = max(1, int(search.params.get(schema.PARAM_REPEATS, 1) or 1))
    return Model(
        search=search,
        one_off_s=parts.one_off_s,
        makespan_outside_s=parts.whole_command_s - makespan,
        trials=account.with_gaps(trials, gaps, slots),
        epochs=max(t.epochs for t in timings),
        configs=configs,
        repeats=repeats,
        concurrency=slots,
        fused=search.tags.get(schema.EXECUTION) == "fused",
        packed=search.tags.get(schema.DEVICE) == "gpu" and _float(search.tags.get(schema.GPUS_PER_TRIAL)) < 1,
        price_per_hour=price_per_hour,
        spread=spread,
        units_per_trial=len(timings) / (configs * repeats),
        epoch_rel_se=_epoch_rel_se(search),
        within_config=_within_config(search),
    )


def _within_config(search: SearchRun) -> tuple[float, int]:
    """The pooled standard deviation of log training time among each configuration's repeats, and its degrees
    of freedom; (0, 0) without repeats."""
    by_key: dict[str, list[float]] = {}
    for trial in search.trials:
        value = trial.metrics.get(search.timing_train, 0.0)
        if trial.finished and value > 0:
            by_key.setdefault(trial.key, []).append(math.log(value))
    squares, dof = 0.0, 0
    for logs in by_key.values():
        mean = sum(logs) / len(logs)
        squares += sum((x - mean) ** 2 for x in logs)
        dof += len(logs) - 1
    return (math.sqrt(squares / dof), dof) if dof else (0.0, 0)


def _epoch_rel_se(search: SearchRun) -> float:
    """The median over trials of their steady epochs' standard error relative to their median (0 without epochs)."""
    found = []
    for trial in search.trials:
        m = trial.metrics
        epochs, median = m.get(schema.STEADY_EPOCHS, 0.0), m.get(schema.STEADY_EPOCH_S, 0.0)
        if epochs >= 2 and median > 0 and schema.STEADY_EPOCH_STD_S in m:
            found.append(m[schema.STEADY_EPOCH_STD_S] / median / math.sqrt(epochs))
    return statistics.median(found) if found else 0.0


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 1.0
    except ValueError:
        return 1.0


@dataclass(frozen=True)
class Interval:
    """A projected figure and its 95% interval; low and high are None where the trials are too few for one."""

    value: float
    low: float | None = None
    high: float | None = None

    def to_dict(self) -> dict[str, float | None]:
        return {"value": self.value, "low": self.low, "high": self.high}

    def text(self, unit: str = "x") -> str:
        value = f"{self.value:.3g}{unit}"
        return value if self.low is None else f"{value} [{self.low:.3g}-{self.high:.3g}]"


def makespan_interval(value: float, sd: float | None) -> Interval:
    if sd is None:
        return Interval(value)
    return Interval(value, max(value - Z95 * sd, 0.0), value + Z95 * sd)


def ratio_interval(makespans: Sequence[float], sds: Sequence[float | None]) -> Interval:
    """base / other with the two sides' relative variances added on the log scale."""
    ratio = makespans[0] / makespans[1]
    if None in sds or min(makespans) <= 0:
        return Interval(ratio)
    relative = math.sqrt(sum((sd / m) ** 2 for sd, m in zip(sds, makespans)))
    return Interval(ratio, ratio * math.exp(-Z95 * relative), ratio * math.exp(Z95 * relative))


def too_few(models: Sequence[Model]) -> str | None:
    """Why there is no interval: '2 trials: too few for an interval; use --repeats 3', or None."""
    fewest = min(len(m.trials) for m in models)
    if fewest >= MIN_TRIALS:
        return None
    repeats = math.ceil(MIN_TRIALS / max(1, min(m.configs for m in models)))
    return f"{fewest} trial{'s' if fewest != 1 else ''}: too few for an interval; use --repeats {max(2, repeats)}"


@dataclass(frozen=True)
class Row:
    """One size, projected for both searches; `why_not` where the model does not hold there."""

    label: str
    epochs: int
    configs: int
    repeats: int
    concurrency: int
    measured: bool  # the size that ran: the model returns what was measured
    makespan_s: tuple[Interval, Interval] | None = None  # baseline, other
    whole_command_s: tuple[float, float] | None = None
    speedup: Interval | None = None  # baseline makespan / other makespan
    cost_ratio: float | None = None  # baseline cost / other cost: above 1 the other is cheaper
    why_not: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "label": self.label,
            "epochs": self.epochs,
            "configs": self.configs,
            "repeats": self.repeats,
            "concurrency": self.concurrency,
            "measured": self.measured,
        }
        if self.why_not:
            return {**out, "why_not": self.why_not}
        return {
            **out,
            "searches": [
                {"makespan_s": m.to_dict(), "whole_command_s": w} for m, w in zip(self.makespan_s, self.whole_command_s)
            ],
            "speedup": self.speedup.to_dict(),
            "cost_ratio": self.cost_ratio,
        }


@dataclass(frozen=True)
class Projection:
    baseline: str  # run ids
    other: str
    rows: tuple[Row, ...]
    break_even: tuple[str, ...]  # in words: where the other search becomes cheaper, and 10x faster
    why_not: str | None = None  # the pair cannot be projected at all
    # The speedup along epochs and along configurations (the rest as run): axis -> ((x, speedup), ...).
    curves: dict = field(default_factory=dict)
    no_interval: str | None = None  # why the figures have no interval ('2 trials: too few ...'), or None
    spreads: tuple[Spread, ...] = ()  # each side's run-to-run spread, in the intervals
    cheaper_from_epochs: int | None = None  # from this many epochs the other search is cheaper (projected)

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "other": self.other,
            "rows": [r.to_dict() for r in self.rows],
            "break_even": list(self.break_even),
            "why_not": self.why_not,
            "curves": {axis: [{"x": x, **s.to_dict()} for x, s in points] for axis, points in self.curves.items()},
            "no_interval": self.no_interval,
            "run_to_run": [s.to_dict() for s in self.spreads],
        }


def _why_not(model: Model, epochs: int, configs: int, repeats: int, concurrency: int) -> str | None:
    name = model.search.label
    if epochs != model.epochs and not model.epochs:
        return f"{name}: its workload has no epochs"
    if model.fused and configs * repeats != model.configs * model.repeats:
        return f"{name}: fused groups train several configurations as one program; their cost depends on the group"
    if model.packed and concurrency != model.concurrency:
        return f"{name}: packed trials share a GPU; more at once changes each one's speed"
    return None


def project_row(base: Model, other: Model, label: str, size: Mapping[str, int]) -> Row:
    epochs = size.get("epochs", base.epochs)
    configs, repeats = size.get("configs", base.configs), size.get("repeats", base.repeats)
    # Each search keeps its own trials at once unless the size names it (both then run that many).
    at_once = size.get("concurrency")
    sized = [(epochs, configs, repeats, at_once or m.concurrency) for m in (base, other)]
    measured = all(s == (m.epochs, m.configs, m.repeats, m.concurrency) for s, m in zip(sized, (base, other)))
    shown = dict(epochs=epochs, configs=configs, repeats=repeats, concurrency=at_once or other.concurrency)
    reasons = [r for m, s in zip((base, other), sized) if (r := _why_not(m, *s))]
    if reasons:
        return Row(label, **shown, measured=measured, why_not="; ".join(reasons))
    points = [m.makespan_s(*s) for m, s in zip((base, other), sized)]
    sds = [m.sd_at(*s) for m, s in zip((base, other), sized)]
    prices = [m.price_at(s[3]) for m, s in zip((base, other), sized)]
    cost_ratio = points[0] * prices[0] / (points[1] * prices[1]) if None not in prices and prices[1] else None
    return Row(
        label,
        **shown,
        measured=measured,
        makespan_s=tuple(makespan_interval(p, sd) for p, sd in zip(points, sds)),
        whole_command_s=tuple(m.whole_s(*s) for m, s in zip((base, other), sized)),
        speedup=ratio_interval(points, sds),
        cost_ratio=cost_ratio,
    )


def _linear(model: Model, axis: str) -> tuple[float, float]:
    """makespan = a + b x along `axis` (epochs, or the configurations' multiple), the rest as run."""
    size = (model.epochs, model.configs, model.repeats, model.concurrency)
    if axis == "epochs":
        at_1, at_2 = model.makespan_s(1, *size[1:]), model.makespan_s(2, *size[1:])
    else:
        at_1 = model.makespan_s(size[0], model.configs, model.repeats, size[3])
        at_2 = model.makespan_s(size[0], 2 * model.configs, model.repeats, size[3])
    return at_1 - (at_2 - at_1), at_2 - at_1


def _crossing(base: tuple[float, float], other: tuple[float, float], ratio: float) -> float | None:
    """The smallest x > 0 where base(x) >= ratio x other(x); None if never (both linear)."""
    a = base[0] - ratio * other[0]
    b = base[1] - ratio * other[1]
    if a >= 0:
        return 0.0
    return -a / b if b > 0 else None


def break_even(base: Model, other: Model) -> list[str]:
    """Where, along epochs and along configurations, the other search is cheaper, and 10x faster."""
    lines = []
    for axis in ("epochs", "configs"):
        if (axis == "epochs" and not (base.epochs and other.epochs)) or (
            axis == "configs" and (base.fused or other.fused)
        ):
            continue
        b, o = _linear(base, axis), _linear(other, axis)
        goals = [(f"{SPEEDUP_GOAL:g}x faster", SPEEDUP_GOAL, "speedup")]
        if base.price_per_hour and other.price_per_hour:
            goals.insert(0, ("cheaper", other.price_per_hour / base.price_per_hour, "cost ratio"))
        for name, ratio, figure in goals:
            x = _crossing(b, o, ratio)
            if x is None:
                slope = b[1] / o[1] if o[1] > 0 else math.inf
                limit = slope if figure == "speedup" else slope / ratio
                lines.append(f"{name}: never along {axis} (the {figure} tends to {limit:.2f} as {axis} grow)")
            elif x == 0:
                lines.append(f"{name}: at every number of {axis}")
            elif axis == "epochs":
                lines.append(f"{name}: from {max(2, math.ceil(x))} epochs (projected)")
            else:
                lines.append(f"{name}: from {math.ceil(x * base.configs)} configurations (projected)")
    return lines


def cheaper_from_epochs(base: Model, other: Model) -> int | None:
    """The fewest epochs from which the other search is cheaper, the rest as run (projected); None: never."""
    if not (base.epochs and other.epochs and base.price_per_hour and other.price_per_hour):
        return None
    x = _crossing(_linear(base, "epochs"), _linear(other, "epochs"), other.price_per_hour / base.price_per_hour)
    return None if x is None else max(2, math.ceil(x))


CURVE_POINTS = (1, 2, 5, 10, 20, 50, 100)  # multiples of the measured epochs or configurations


def curves(base: Model, other: Model) -> dict[str, tuple]:
    """The speedup at multiples of the measured epochs and configurations, with its interval."""
    out = {}
    for axis in ("epochs", "configs"):
        measured = base.epochs if axis == "epochs" else base.configs
        if not measured or any(_why_not(m, *_sized(m, axis, measured * 2)) for m in (base, other)):
            continue
        points = []
        for multiple in CURVE_POINTS:
            sizes = [_sized(m, axis, measured * multiple) for m in (base, other)]
            values = [m.makespan_s(*s) for m, s in zip((base, other), sizes)]
            sds = [m.sd_at(*s) for m, s in zip((base, other), sizes)]
            points.append((measured * multiple, ratio_interval(values, sds)))
        out[axis] = tuple(points)
    return out


def _sized(model: Model, axis: str, value: int) -> tuple[int, int, int, int]:
    if axis == "epochs":
        return value, model.configs, model.repeats, model.concurrency
    return model.epochs, value, model.repeats, model.concurrency


def default_sizes(base: Model) -> list[tuple[str, dict[str, int]]]:
    return [
        ("as run", {}),
        ("10x epochs", {"epochs": base.epochs * 10}),
        ("10x configurations", {"configs": base.configs * 10}),
    ]


def project(
    searches: Sequence[SearchRun],
    prices: Sequence[float | None],
    spreads: Sequence[Spread],
    asked: Mapping[str, int],
) -> Projection:
    """The pair's projection at the default sizes and the one asked for (--project)."""
    base_search, other_search = searches
    models = [model_of(s, p, spread) for s, p, spread in zip(searches, prices, spreads)]
    reasons = [m for m in models if isinstance(m, str)]
    if reasons:
        return Projection(base_search.run_id, other_search.run_id, (), (), why_not="; ".join(reasons))
    base, other = models
    sizes = default_sizes(base)
    if not base.epochs:
        sizes = [s for s in sizes if "epochs" not in s[1]]
    if asked:
        sizes.append((ASKED, dict(asked)))
    rows = tuple(project_row(base, other, label, size) for label, size in sizes)
    return Projection(
        base_search.run_id,
        other_search.run_id,
        rows,
        tuple(break_even(base, other)),
        curves=curves(base, other),
        no_interval=too_few(models),
        spreads=tuple(spreads),
        cheaper_from_epochs=cheaper_from_epochs(base, other),
    )


def asked_problem(projection: Projection | None) -> str | None:
    """Why the size asked with --project was not projected, or None where it was (or none was asked)."""
    if projection is None:
        return None
    if projection.why_not:
        return projection.why_not
    asked = [r for r in projection.rows if r.label == ASKED]
    return asked[0].why_not if asked else None


@dataclass(frozen=True)
class SearchProjection:
    """One search projected to another size: its makespan and whole command there, and their cost."""

    run_id: str
    label: str
    size: Mapping[str, int]  # epochs, configs, repeats, concurrency
    makespan_s: Interval
    whole_command_s: float
    cost: float | None  # $ at the search's price per hour
    measured_makespan_s: float
    no_interval: str | None
    spread: Spread

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "size": dict(self.size),
            "makespan_s": self.makespan_s.to_dict(),
            "whole_command_s": self.whole_command_s,
            "cost": self.cost,
            "measured_makespan_s": self.measured_makespan_s,
            "no_interval": self.no_interval,
            "run_to_run": self.spread.to_dict(),
        }


def project_search(
    search: SearchRun, price_per_hour: float | None, spread: Spread, asked: Mapping[str, int]
) -> SearchProjection:
    """One search at the size asked (compare RUN --project ...); a UserError says what cannot be projected."""
    model = model_of(search, price_per_hour, spread)
    if isinstance(model, str):
        raise UserError(f"--project: cannot project {model}")
    size = (
        asked.get("epochs", model.epochs),
        asked.get("configs", model.configs),
        asked.get("repeats", model.repeats),
        asked.get("concurrency", model.concurrency),
    )
    why = _why_not(model, *size)
    if why:
        raise UserError(f"--project: cannot project {why}")
    makespan = model.makespan_s(*size)
    price = model.price_at(size[3])
    return SearchProjection(
        run_id=search.run_id,
        label=search.label,
        size=dict(zip(KEYS, size)),
        makespan_s=makespan_interval(makespan, model.sd_at(*size)),
        whole_command_s=model.whole_s(*size),
        cost=None if price is None else makespan / 3600 * price,
        measured_makespan_s=search.metrics.get(schema.MAKESPAN_S, 0.0),
        no_interval=too_few([model]),
        spread=spread,
    )
