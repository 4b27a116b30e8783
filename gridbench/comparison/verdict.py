"""The answer in one sentence: how much sooner, and at what cost, the other search finishes.

    verdict: the GPU search finishes 4.6x sooner [3.8-5.6] and costs 0.97x as much, for
    8 configurations x 4 epochs (the whole search as run); from 5 epochs it is also cheaper (projected)

The figure is the whole search's makespan ratio: as run, or at the size asked with
--project (then labelled projected). Its interval is the projection model's at that size
(gridbench.comparison.projection: the trials' spread and the run-to-run spread); where the
trials are too few for one, the sentence says so instead. Every other figure of a
comparison is detail above it. Nothing here reads the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gridbench.comparison.projection import ASKED, Interval, SearchProjection
from gridbench.tracking import schema

AS_RUN = "the whole search as run"


@dataclass(frozen=True)
class Verdict:
    text: str
    speedup: float  # baseline makespan / other makespan
    interval: tuple[float, float] | None  # its 95% interval; None where too few trials
    cost_ratio: float | None  # baseline cost / other cost, as every cost ratio of a comparison (above 1: cheaper)
    size: dict[str, int] = field(default_factory=dict)  # epochs, configs, repeats
    basis: str = AS_RUN  # AS_RUN, or "projected to ..."
    no_interval: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "speedup": self.speedup,
            "interval": list(self.interval) if self.interval else None,
            "cost_ratio": self.cost_ratio,
            "relative_cost": 1 / self.cost_ratio if self.cost_ratio else None,
            "size": dict(self.size),
            "basis": self.basis,
            "no_interval": self.no_interval,
        }


def _who(base, other) -> str:
    devices = (base.tags.get(schema.DEVICE), other.tags.get(schema.DEVICE))
    if devices == ("cpu", "gpu"):
        return "the GPU search"
    if devices == ("gpu", "cpu"):
        return "the CPU search"
    return f"{other.label} (against {base.label})"


def _size_text(size: dict[str, int]) -> str:
    text = f"{size['configs']} configuration{'s' if size['configs'] != 1 else ''}"
    if size.get("epochs"):
        text += f" x {size['epochs']} epochs"
    return text + (f" x {size['repeats']} repeats" if size.get("repeats", 1) > 1 else "")


def speed_words(speedup: Interval) -> str:
    """'finishes 4.6x sooner [3.8-5.6]', or 'takes 2x as long [1.5-2.5]' where the other search is slower."""
    value, low, high, word = speedup.value, speedup.low, speedup.high, "sooner"
    if value < 1:
        value, low, high, word = 1 / value, (1 / high if high else None), (1 / low if low else None), "as long"
    interval = f" [{low:.3g}-{high:.3g}]" if low is not None else ""
    return f"{'finishes' if word == 'sooner' else 'takes'} {value:.3g}x {word}{interval}"


def cost_words(cost_ratio: float | None) -> str:
    return "" if not cost_ratio else f" and costs {1 / cost_ratio:.3g}x as much"


def of_pairing(comparison, pairing) -> Verdict:
    """The pairing's verdict (gridbench.comparison.pairing): at the size asked with --project where it was
    projected, else the whole search as run."""
    base, other, projected = comparison.baseline, pairing.other, pairing.projection
    rows = {r.label: r for r in projected.rows} if projected else {}
    row = rows.get(ASKED) if rows.get(ASKED) and not rows[ASKED].why_not else rows.get("as run")
    if row is None or row.why_not:  # no model: the makespans as measured, no interval
        why = (projected.why_not if projected else None) or "no account to project from"
        speedup, cost_ratio = Interval(pairing.makespan_speedup or float("nan")), _figures_cost_ratio(comparison, other)
        size, no_interval = {"configs": len({t.key for t in other.trials})}, f"not projected: {why}"
    else:
        speedup, cost_ratio, no_interval = row.speedup, row.cost_ratio, projected.no_interval
        size = {"epochs": row.epochs, "configs": row.configs, "repeats": row.repeats}
    basis = AS_RUN if row is None or row.label != ASKED else f"projected to {_size_text(size)}"
    tail = ""
    cheaper_from = projected.cheaper_from_epochs if projected else None
    if cost_ratio and cost_ratio < 1 and cheaper_from and basis == AS_RUN:
        tail = f"; from {cheaper_from} epochs it is also cheaper (projected)"
    text = f"verdict: {_who(base, other)} {speed_words(speedup)}{cost_words(cost_ratio)}, for {_size_text(size)}"
    text += f" ({basis})"
    text += tail + (f" (no interval: {no_interval})" if no_interval else "")
    interval = (speedup.low, speedup.high) if speedup.low is not None else None
    return Verdict(text, speedup.value, interval, cost_ratio, size, basis, no_interval)


def _figures_cost_ratio(comparison, other) -> float | None:
    figures = comparison.figures[comparison.searches.index(other)]
    return 1 / figures.relative_cost if figures.relative_cost else None


def of_search(projected: SearchProjection) -> str:
    """One search at another size (compare RUN --project): its time and cost there, in one sentence."""
    size = {k: projected.size[k] for k in ("epochs", "configs", "repeats")}
    cost = f" and cost ${projected.cost:.3g}" if projected.cost is not None else ""
    text = (
        f"verdict: this search ({projected.label}) would take {projected.makespan_s.text(' s')} (makespan; whole "
        f"command {projected.whole_command_s:.1f} s){cost}, for {_size_text(size)} (projected from its run)"
    )
    return text + (f" (no interval: {projected.no_interval})" if projected.no_interval else "")
