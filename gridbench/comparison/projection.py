"""What a compared pair would show at another size: a projection from the searches' accounts.

    account (one-off parts) + trials' per-trial costs -> makespan at (epochs, configs, repeats, concurrency)

The model: a search of n trials, c at once, E epochs each, takes

    whole(n, E, c) = one-off + n / c x mean over trials of (overhead + warm-up + E x epoch)

The one-off parts (start-up, compiling, the workers' start, the end) are held as measured;
each trial's overhead (its share of the gaps between trials included) and warm-up scale
with the trials, its epochs with the epochs. At the measured size the model returns the
measured account exactly. It assumes the larger grid has the same mix of configurations
(more learning rates, more repeats: programs already compiled) and that each trial keeps
its resources. The interval is a bootstrap over the trials (their spread); the one-off
parts are one measurement each and add no width. A projection is labelled as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from gridbench import account
from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.stored_searches import SearchRun

KEYS = ("epochs", "configs", "repeats", "concurrency")
BOOTSTRAP_SAMPLES = 2000
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
    # Ray trials per configuration and repeat: 1, or less where a fused group or an inner axis trains several.
    units_per_trial: float = 1.0

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

    def price_at(self, concurrency: int) -> float | None:
        """$/hour at `concurrency` trials at once: each trial keeps its resources."""
        return None if self.price_per_hour is None else self.price_per_hour * concurrency / self.concurrency


def model_of(search: SearchRun, price_per_hour: float | None) -> Model | str:
    """The search's model, or why it cannot be projected."""
    parts = account.Account.from_metrics(search.metrics)
    if parts is None:
        return f"{search.label}: recorded before gridbench kept an account (schema 6); run it again to project it"
    failed = [t for t in search.trials if not t.finished]
    if failed:
        return f"{search.label}: {len(failed)} trial(s) did not finish; a projection needs every trial's costs"
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
        units_per_trial=len(timings) / (configs * repeats),
    )


def _float(text: str | None) -> float:
    try:
        return float(text) if text else 1.0
    except ValueError:
        return 1.0


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline": self.baseline,
            "other": self.other,
            "rows": [r.to_dict() for r in self.rows],
            "break_even": list(self.break_even),
            "why_not": self.why_not,
            "curves": {axis: [{"x": x, **s.to_dict()} for x, s in points] for axis, points in self.curves.items()},
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


def _bootstrap(model: Model, size: tuple[int, int, int, int], rng, samples=BOOTSTRAP_SAMPLES) -> list:
    """The makespan at `size` over `samples` resamplings of the trials (numpy: a 1,000-trial search in ms)."""
    import numpy as np

    epochs, *rest = size
    costs = np.array(model.trial_costs(epochs))
    means = costs[rng.integers(0, len(costs), size=(samples, len(costs)))].mean(axis=1)
    return list(model.whole_at(means, *rest) - model.makespan_outside_s)


def _generator(seed: int):
    import numpy as np

    return np.random.default_rng(seed)  # the same seed, the same interval: a comparison reads the same twice


def _quantiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[int(0.025 * (len(ordered) - 1))], ordered[int(math.ceil(0.975 * (len(ordered) - 1)))]


def project_row(base: Model, other: Model, label: str, size: Mapping[str, int], seed: int = 0) -> Row:
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
    rng = _generator(seed)
    samples = [_bootstrap(m, s, rng) for m, s in zip((base, other), sized)]
    points = [m.makespan_s(*s) for m, s in zip((base, other), sized)]
    makespans = tuple(Interval(p, *_quantiles(v)) for p, v in zip(points, samples))
    ratios = [a / b for a, b in zip(*samples) if b > 0]
    prices = [m.price_at(s[3]) for m, s in zip((base, other), sized)]
    cost_ratio = points[0] * prices[0] / (points[1] * prices[1]) if None not in prices and prices[1] else None
    return Row(
        label,
        **shown,
        measured=measured,
        makespan_s=makespans,
        whole_command_s=tuple(m.whole_s(*s) for m, s in zip((base, other), sized)),
        speedup=Interval(points[0] / points[1], *_quantiles(ratios)),
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


CURVE_POINTS = (1, 2, 5, 10, 20, 50, 100)  # multiples of the measured epochs or configurations


def curves(base: Model, other: Model, seed: int = 0) -> dict[str, tuple]:
    """The speedup at multiples of the measured epochs and configurations, with its interval (fewer resamples)."""
    rng, out = _generator(seed), {}
    for axis in ("epochs", "configs"):
        measured = base.epochs if axis == "epochs" else base.configs
        if not measured or any(_why_not(m, *_sized(m, axis, measured * 2)) for m in (base, other)):
            continue
        points = []
        for multiple in CURVE_POINTS:
            sizes = [_sized(m, axis, measured * multiple) for m in (base, other)]
            values = [m.makespan_s(*s) for m, s in zip((base, other), sizes)]
            samples = [_bootstrap(m, s, rng, samples=300) for m, s in zip((base, other), sizes)]
            ratios = [a / b for a, b in zip(*samples) if b > 0]
            points.append((measured * multiple, Interval(values[0] / values[1], *_quantiles(ratios))))
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


def project(base_search: SearchRun, other_search: SearchRun, prices: Sequence[float | None], asked: Mapping[str, int]):
    """The pair's projection at the default sizes and the one asked for (--project)."""
    models = [model_of(s, p) for s, p in zip((base_search, other_search), prices)]
    reasons = [m for m in models if isinstance(m, str)]
    if reasons:
        return Projection(base_search.run_id, other_search.run_id, (), (), why_not="; ".join(reasons))
    base, other = models
    sizes = default_sizes(base)
    if not base.epochs:
        sizes = [s for s in sizes if "epochs" not in s[1]]
    if asked:
        sizes.append(("asked (--project)", dict(asked)))
    rows = tuple(project_row(base, other, label, size) for label, size in sizes)
    return Projection(
        base_search.run_id, other_search.run_id, rows, tuple(break_even(base, other)), curves=curves(base, other)
    )
