"""A pilot's projection of the whole search it stands for, and its check once that search has run.

    pilot (one trial per program, a few epochs) -> each program's trial: its overhead, warm-up and epoch
    -> the whole search: one-off parts held + (each program's configurations x repeats x its trial's cost) / at once

The pilot's run records the whole search as written (gridbench.gridsearch.pilot): its
epochs, configurations, repeats, trials at once, and how many configurations each program
stands for. Each configuration costs what its program's pilot trial cost, with the epochs
scaled: its overhead (its share of the gaps between trials included) once, its steady
epoch E times; the pilot trial's setup, evaluation and warm-up are the program's first
use, paid once in each worker that runs the program (a later trial reuses the model).
The one-off parts (start-up, compiling each program once, the workers' start, the end)
are held as the pilot measured them, but for its compile warm-up under the persistent
compile cache: the whole search finds the programs the warm-up left there. The interval
adds, as variances, each pilot trial's epoch-to-epoch spread, the run-to-run spread of the
pace (gridbench.comparison.spread) and
that of the one-off parts: run to run, or as far as a pilot's parts inside its makespan stood
from its whole search's (gridbench/data/pilot_spread.toml: a whole search pays them in another
order), the larger. A pilot has one trial per program, so no trial-to-trial spread is seen. A
projection is labelled as one. Pure arithmetic on records read back.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Mapping

from gridbench import account
from gridbench.comparison.projection import Interval, makespan_interval, ratio_interval
from gridbench.comparison.spread import Spread, pilot_one_off
from gridbench.comparison.verdict import cost_words, speed_words
from gridbench.tracking import schema
from gridbench.tracking.stored_searches import SearchRun

PILOT_SHARE_NOTED = 0.5  # a pilot pair that took this share of its whole pair's time or more saved little


@dataclass(frozen=True)
class Whole:
    """The whole search a pilot stands for, as written."""

    epochs: int
    configs: int
    repeats: int
    concurrency: int
    programs: Mapping[str, int]  # each program's pilot configuration -> the configurations it stands for

    def scaled(self, asked: Mapping[str, int]) -> Whole:
        """At another size (--project): more configurations keep the programs' mix."""
        configs = asked.get("configs", self.configs)
        share = {key: count * configs / self.configs for key, count in self.programs.items()}
        return Whole(asked.get("epochs", self.epochs), configs, asked.get("repeats", self.repeats),
                     asked.get("concurrency", self.concurrency), share)  # fmt: skip

    def text(self) -> str:
        repeats = f" x {self.repeats} repeats" if self.repeats > 1 else ""
        return f"{self.configs} configurations x {self.epochs} epochs{repeats}"


def whole_of(search: SearchRun) -> Whole | None:
    """The whole search a pilot's run stands for; None for a run that is not a pilot."""
    if search.tags.get(schema.PILOT) != "true" or schema.PILOT_WHOLE not in search.tags:
        return None
    found = json.loads(search.tags[schema.PILOT_WHOLE])
    return Whole(found["epochs"], found["configs"], found["repeats"], found["concurrency"], found["programs"])


@dataclass(frozen=True)
class PilotProjection:
    pilot: SearchRun
    whole: Whole
    makespan_s: Interval
    whole_command_s: float
    cost: float | None  # $ for the whole search at the pilot's $/hour (the same machine)
    pilot_command_s: float  # the pilot's own whole command, as its account measured it
    spread: Spread
    one_off_sd_s: float  # the one-off parts' standard deviation: run to run, or pilot against whole, the larger
    one_off_from: str = "run to run"  # which of the two, in words
    warmup_left_out_s: float = 0.0  # the pair's compile warm-up, which the whole pair finds done (persistent cache)
    cold_cache: bool = False  # the pilot started on an empty persistent cache, which the whole search finds filled

    def to_dict(self) -> dict[str, Any]:
        return {
            "pilot": self.pilot.run_id,
            "device": self.pilot.tags.get(schema.DEVICE),
            "whole": {**vars(self.whole), "programs": dict(self.whole.programs)},
            "makespan_s": self.makespan_s.to_dict(),
            "whole_command_s": self.whole_command_s,
            "cost": self.cost,
            "pilot_command_s": self.pilot_command_s,
            "run_to_run": self.spread.to_dict(),
            "one_off_sd_s": self.one_off_sd_s,
            "one_off_from": self.one_off_from,
            "warmup_left_out_s": self.warmup_left_out_s,
            "cold_cache": self.cold_cache,
        }


@dataclass(frozen=True)
class _Program:
    """What a program's trials cost: the first in a worker pays `first_use_s` more; every one, the rest."""

    overhead_s: float  # a trial's own overhead once the program is in use, its share of the gaps included
    epoch_s: float
    epoch_rel_se: float
    first_use_s: float  # building the model, the first epoch's excess, the first evaluation: once per worker

    def cost(self, epochs: int) -> float:
        return self.overhead_s + epochs * self.epoch_s


def _program(trial, share: account.TrialShare, train: str) -> _Program:
    """A program from its pilot trial, the program's first use in its worker.

    A later trial of a program reuses its built model and compiled steps (gridbench.workloads.programs): in a
    64-configuration MLP search on an H100 host's cores, later trials took 0.06-0.08 s of setup, 0.015-0.06 s of
    evaluation and a first epoch within 0.13 s of a steady one, against up to 2.0 s, 0.11-0.26 s and 0.36-1.05 s
    for a program's first (docs/results/h100-pilot.md). So the pilot trial's setup, evaluation and warm-up are
    held as its program's first use, paid once per worker.
    """
    own, m = account.trial_parts(trial.metrics, train), trial.metrics
    overhead = max(0.0, share.steady_s - own["warmup_s"] - own["training_s"])
    first_use = min(overhead, m.get(schema.SETUP_S, 0.0) + m.get(schema.EVAL_S, 0.0)) + own["warmup_s"]
    epoch = own["training_s"] / own["epochs"] if own["epochs"] else own["training_s"]
    spread = m.get(schema.STEADY_EPOCH_STD_S, 0.0) / m[schema.STEADY_EPOCH_S] if m.get(schema.STEADY_EPOCH_S) else 0
    return _Program(overhead + own["warmup_s"] - first_use, epoch, spread / math.sqrt(max(1, own["epochs"] - 1)),
                    first_use)  # fmt: skip


def _programs(pilot: SearchRun, parts: account.Account) -> dict[str, _Program]:
    """Each program from its pilot trial, its share of the gaps between the pilot's trials added."""
    train = pilot.timing_train
    shares = account.trial_shares([(t.worker, t.started_s, t.ended_s, t.metrics) for t in pilot.trials], train)
    found = {t.key: _program(t, share, train) for t, share in zip(pilot.trials, shares) if t.finished}
    slots = max(1, min(int(pilot.metrics.get(schema.CONCURRENCY, 1)), len(found)))
    busy = sum(p.overhead_s + p.first_use_s for p in found.values())  # each trial's overhead and warm-up
    gaps = max(0.0, parts.trial_overhead_s + parts.warmup_s - busy / slots) * slots / max(1, len(found))
    return {k: _Program(p.overhead_s + gaps, p.epoch_s, p.epoch_rel_se, p.first_use_s) for k, p in found.items()}


def project(
    pilot: SearchRun, price_per_hour: float | None, spread: Spread, asked: Mapping[str, int] | None = None
) -> PilotProjection | str:
    """The whole search (or the size asked) from its pilot; or why it cannot be projected, in words."""
    whole, parts = whole_of(pilot), account.Account.from_metrics(pilot.metrics)
    if whole is None or parts is None:
        return f"{pilot.label}: not a pilot with an account; run `search ... --pilot` again"
    failed = sorted(t.key for t in pilot.trials if not t.finished)
    if failed:
        return f"{pilot.label}: the pilot trial of {'; '.join(failed)} did not finish: its programs' cost is unknown"
    programs = _programs(pilot, parts)
    missing = sorted(set(whole.programs) - set(programs))
    if missing:
        return f"{pilot.label}: no pilot trial for the program of {'; '.join(missing)}"
    size = whole.scaled(asked or {})
    per_slot = size.repeats / size.concurrency
    # Each worker pays a program's first use once: with c at once, a program of n trials is first in min(c, n).
    firsts = sum(min(size.concurrency, size.programs[k] * size.repeats) * p.first_use_s for k, p in programs.items())
    steady = firsts / size.concurrency
    steady += sum(size.programs[k] * per_slot * p.cost(size.epochs) for k, p in programs.items())
    training = sum(size.programs[k] * per_slot * size.epochs * p.epoch_s for k, p in programs.items())
    epoch_se = training * max((p.epoch_rel_se for p in programs.values()), default=0.0) / math.sqrt(len(programs))
    outside = parts.whole_command_s - pilot.metrics.get(schema.MAKESPAN_S, parts.whole_command_s)
    one_off_sd, one_off_from = _one_off_sd(pilot, parts.one_off_s - outside, spread)
    sd = math.sqrt(epoch_se**2 + (spread.pace * steady) ** 2 + one_off_sd**2)
    makespan = parts.one_off_s - outside + steady
    warmup = _warmup_left_out(parts)
    return PilotProjection(
        pilot=pilot,
        whole=size,
        makespan_s=makespan_interval(makespan, sd),
        whole_command_s=parts.one_off_s - warmup + steady,
        cost=None if price_per_hour is None else makespan / 3600 * price_per_hour,
        pilot_command_s=parts.whole_command_s,
        spread=spread,
        one_off_sd_s=one_off_sd,
        one_off_from=one_off_from,
        warmup_left_out_s=warmup,
        cold_cache=pilot.tags.get(schema.COMPILE_CACHE) == "persistent"  # compile_cache.PERSISTENT: it imports jax
        and pilot.tags.get(schema.COMPILE_CACHE_STATE, "").startswith("empty"),
    )


WARMUP_SEEN_S = 0.05  # a warm-up shorter than this compiled nothing: it found every program ready


def _warmup_left_out(parts: account.Account) -> float:
    """The pair's compile warm-up, which the whole pair will not pay again. A warm-up runs only where a search of
    the pair keeps its compile cache across searches (gridbench.gridsearch.warmup), so the programs it compiled are
    there when the whole pair's warm-up looks. It is in the first search's account, outside its makespan: only the
    whole command moves."""
    return parts.compile_warmup_s if parts.compile_warmup_s >= WARMUP_SEEN_S else 0.0


def _one_off_sd(pilot: SearchRun, inside_s: float, spread: Spread) -> tuple[float, str]:
    """The one-off parts' standard deviation, and what it is: the run-to-run spread, or how far a pilot's parts
    inside the makespan (`inside_s`) stood from its whole search's, whichever is larger."""
    relative, _ = pilot_one_off(pilot.tags.get(schema.DEVICE, "cpu"))
    if relative * inside_s > spread.one_off_s:
        return (
            relative * inside_s,
            f"{relative:.0%} of the pilot's {inside_s:.1f} s inside its makespan, as far as a pilot's stood from "
            "its whole search's",
        )
    return spread.one_off_s, "run to run"


def verdict(base: PilotProjection, other: PilotProjection) -> str:
    """The whole search on both devices, projected from their pilots, in one sentence."""
    speedup = ratio_interval(
        [base.makespan_s.value, other.makespan_s.value], [_sd(base.makespan_s), _sd(other.makespan_s)]
    )
    names = [_device(base, other), _device(other, base)]
    cost_ratio = base.cost / other.cost if base.cost and other.cost else None
    took = base.pilot_command_s + other.pilot_command_s
    who = "the GPU search" if names[1] == "the GPU" else f"the search on {names[1]}"
    return (
        f"verdict: the whole search ({other.whole.text()}) would take {base.makespan_s.text(' s')} on {names[0]} "
        f"and {other.makespan_s.text(' s')} on {names[1]}: {who} {speed_words(speedup)}{cost_words(cost_ratio)} "
        f"(projected from a pilot of {len(base.whole.programs)} configurations x "
        f"{base.pilot.params.get('epochs', '?')} epochs that took {took:.0f} s{_pilot_share_note(took, base, other)})"
    )


def _pilot_share_note(took: float, base: PilotProjection, other: PilotProjection) -> str:
    """Said where the pilot pair took a large share of what the whole pair would take instead of it: its fixed costs
    then decide both. Like for like: the whole pair, run in its stead, would pay the compile warm-up too."""
    whole = base.whole_command_s + other.whole_command_s + base.warmup_left_out_s + other.warmup_left_out_s
    if whole <= 0 or took < PILOT_SHARE_NOTED * whole:
        return ""
    return (
        f", {took / whole:.0%} of the whole pair's projected {whole:.0f} s: at this size the pilot saves little, "
        "and one-off costs decide the projection"
    )


def _sd(interval: Interval) -> float | None:
    return None if interval.low is None else (interval.high - interval.value) / 1.959964


def _device(projection: PilotProjection, other: PilotProjection) -> str:
    """'the GPU', 'the CPU'; a search's label where both pilots ran on the same kind of device."""
    device = projection.pilot.tags.get(schema.DEVICE)
    if device == other.pilot.tags.get(schema.DEVICE):
        return projection.pilot.label
    return "the GPU" if device == "gpu" else "the CPU"


def lines(projection: PilotProjection) -> list[str]:
    """One device's projected whole search, labelled as a projection."""
    p = projection
    cost = f", ${p.cost:.3g}" if p.cost is not None else ""
    warmup = (
        f"; the pair's compile warm-up ({p.warmup_left_out_s:.1f} s) left out: the whole pair finds its programs "
        "in the persistent compile cache"
        if p.warmup_left_out_s
        else ""
    )
    if p.cold_cache:  # its trials' first uses compiled what the whole search's will load: not modelled
        warmup += (
            "; the pilot started on an empty compile cache, which the whole search finds filled: its programs' "
            "first uses are held as compiled, so the makespan leans high"
        )
    return [
        f"{p.pilot.label} (pilot, its own command {p.pilot_command_s:.1f} s): the whole search ({p.whole.text()}, "
        f"{p.whole.concurrency} at once) projected: makespan {p.makespan_s.text(' s')}, whole command "
        f"{p.whole_command_s:.1f} s{cost}; a model, not a measurement (interval: each program's epoch spread, "
        f"{p.spread.describe()}; the one-off parts held at {p.one_off_sd_s:.1f} s: {p.one_off_from}{warmup})"
    ]


def check(projection: PilotProjection, measured: SearchRun) -> str:
    """The pilot's projection against the whole search it stood for, once run."""
    value = measured.metrics.get(schema.MAKESPAN_S, 0.0)
    interval = projection.makespan_s
    error = (interval.value - value) / value if value else float("nan")
    inside = "" if interval.low is None else (", inside its interval" if interval.low <= value <= interval.high
                                               else ", OUTSIDE its interval")  # fmt: skip
    return (
        f"{measured.label}: pilot {projection.pilot.run_id[:8]} projected a makespan of {interval.text(' s')}; "
        f"measured {value:.1f} s: error {error:+.1%}{inside}"
    )
