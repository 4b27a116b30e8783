"""The order in which Tune starts a search's trials: the grid's, or balanced over its slots where their times are known.

    grid order (gridsearch.tuning) -> Tune points -> [each trial's own time at an earlier count] -> balanced order

With several trials at once, the order decides how the last ones line up: in grid order a long
trial can start last and run alone while the other slots stand idle. `scale` measures every
trial at its first count, so each later count shares its trials out over its slots by those
times, so that the slots end together, and starts them in the order that hands each slot its
share as it frees (longest first within each slot). The share is the better of two quick
heuristics, each improved by moving or swapping trials out of the fullest slot: longest first
over all slots (each slot takes the longest trial left: the rule until 2026-11-28) and the
largest differencing method. On the 300-epoch MNIST grid at 4 GPUs, longest first left the
fullest slot 1.2 s past what a MILP solver (HiGHS, through SciPy) found; the solver ran
1.4 s in the command, the heuristics run in a millisecond and came within 0.5 s of it
(docs/results/around-training.md, "twelfth"). Where the first count runs one trial at a time,
its makespan does not depend on the order; where it runs several (packed trials, `--cpus
2,...`), it ran in the grid's order, and the later counts' speedup holds the order's gain too
(scale's report says so).
"""

from __future__ import annotations

import bisect
import heapq
import statistics
import time
from dataclasses import dataclass
from typing import Any, Collection, Sequence

from gridbench.gridsearch.plan import SearchPlan
from gridbench.tracking import schema
from gridbench.tracking.records import TrialRecord, config_key
from gridbench.trial import REPEAT_KEY

BALANCED = "balanced over the count's slots, by each trial's epochs and evaluation at the first count"
MIN_GAIN_S = 0.001  # a step that shortens the fullest slot by less is not taken: below what a trial's time tells
STEPS_PER_SLOT = 8  # the share's improvement takes this many steps a slot at most: 1,000 trials plan in well under 1 s


@dataclass(frozen=True)
class Order:
    """A search's points in the order Tune starts them, and what the first count's times predict of it."""

    points: tuple[dict[str, Any], ...]
    slots: int
    fullest_s: float  # the fullest slot's predicted seconds in this order
    longest_first_s: float  # the same, had the trials started longest first
    planned_s: float  # the driver's time to plan the order

    def describe(self) -> str:
        """The order's plan in one line, for the search run's tags."""
        return (
            f"{len(self.points)} trials on {self.slots} slot(s): by the first count's times the fullest slot takes "
            f"{self.fullest_s:.2f} s, {self.longest_first_s:.2f} s longest first; planned in {self.planned_s:.3f} s"
        )


def points(plan: SearchPlan, finished: Collection[tuple[str, int]] = ()) -> list[dict[str, Any]]:
    """The search's Tune points in grid order (one per group where a workload trains an inner axis), leaving out
    `finished` (configuration key, repeat) pairs."""
    inner = plan.spec.workload.inner_axis
    found: dict[str, dict[str, Any]] = {}  # by the point's key: a group's configurations share one point
    for config in plan.spec.configurations():
        for repeat in range(plan.spec.repeats):
            if (config_key(config), repeat) in finished:
                continue
            point = {axis: value for axis, value in config.items() if axis != inner}
            point[REPEAT_KEY] = repeat
            found.setdefault(config_key(point), point)
    return list(found.values())


def own_time(trial: TrialRecord) -> float:
    """What a trial costs in any worker: its epochs and its evaluation, without its worker's start or its program's
    first load (which fall on whichever trial a worker runs first); its wall less both where no epochs are timed."""
    metrics = trial.metrics
    if schema.TRAIN_EPOCHS_S in metrics:
        return metrics[schema.TRAIN_EPOCHS_S] + metrics.get(schema.EVAL_S, 0.0)
    return metrics.get(schema.TRIAL_WALL_S, 0.0) - metrics.get(schema.IMPORT_S, 0.0) - metrics.get(schema.SETUP_S, 0.0)


def balanced(plan: SearchPlan, measured: Sequence[TrialRecord], slots: int) -> Order | None:
    """The plan's points shared out over `slots` by `measured` trials of the same grid, in the order that hands each
    slot its share; None where the order cannot be told (fused groups, a workload's inner axis, a point with no
    finished trial)."""
    started = time.perf_counter()
    timed = _point_seconds(plan, measured)
    if timed is None:
        return None
    seconds = [s for _, s in timed]
    shares = share_out(seconds, slots)
    return Order(
        points=tuple(timed[i][0] for i in _handing_order(shares, seconds)),
        slots=slots,
        fullest_s=fullest(shares, seconds),
        longest_first_s=fullest(longest_first_shares(seconds, slots), seconds),
        planned_s=time.perf_counter() - started,
    )


def share_out(seconds: Sequence[float], slots: int) -> list[list[int]]:
    """Each slot's trials (indices into `seconds`), longest first: the better share of two heuristics, each improved
    by moves and swaps out of its fullest slot."""
    if slots < 1:
        raise ValueError(f"slots must be at least 1, got {slots}")
    if not seconds:
        return [[] for _ in range(slots)]
    found = [longest_first_shares(seconds, slots), _differencing_shares(seconds, slots)]
    shares = min((_improved(share, seconds) for share in found), key=lambda share: fullest(share, seconds))
    return [sorted(share, key=lambda i: (-seconds[i], i)) for share in shares]


def _point_seconds(plan: SearchPlan, measured: Sequence[TrialRecord]) -> list[tuple[dict, float]] | None:
    """Each point with its predicted seconds: its own time at the first count, plus what a trial's wall held
    besides its own time there (the median, so that a worker's start on its first trial does not count)."""
    if plan.fused_groups or plan.spec.workload.inner_axis:
        return None
    finished = [t for t in measured if t.finished]
    times = {(config_key(t.config), t.repeat): own_time(t) for t in finished}
    ordered = points(plan)
    keys = [(config_key({k: v for k, v in p.items() if k != REPEAT_KEY}), p[REPEAT_KEY]) for p in ordered]
    if not ordered or any(key not in times for key in keys):
        return None
    besides_own_s = statistics.median(max(0.0, t.metrics.get(schema.TRIAL_WALL_S, 0.0) - own_time(t)) for t in finished)
    return [(point, times[key] + besides_own_s) for point, key in zip(ordered, keys)]


def longest_first_shares(seconds: Sequence[float], slots: int) -> list[list[int]]:
    """Each slot's trials (indices) where every slot, as it frees, takes the longest trial left."""
    shares: list[list[int]] = [[] for _ in range(slots)]
    free = [(0.0, slot) for slot in range(slots)]
    for index in sorted(range(len(seconds)), key=lambda i: (-seconds[i], i)):
        at, slot = heapq.heappop(free)
        shares[slot].append(index)
        heapq.heappush(free, (at + seconds[index], slot))
    return shares


def _differencing_shares(seconds: Sequence[float], slots: int) -> list[list[int]]:
    """Each slot's trials (indices) by the largest differencing method (Karmarkar and Karp's, over `slots` parts):
    the two partial shares whose slots differ most are merged, the fullest slot of one with the emptiest of the
    other, until one share is left."""
    heap = []
    for index, s in enumerate(seconds):
        parts = [(s, [index])] + [(0.0, []) for _ in range(slots - 1)]
        heap.append((-s, index, parts))
    heapq.heapify(heap)
    tiebreak = len(seconds)  # equal differences are never left to heapq to compare the shares' lists
    while len(heap) > 1:
        first, second = heapq.heappop(heap)[2], heapq.heappop(heap)[2]
        first = sorted(first, key=lambda part: -part[0])
        second = sorted(second, key=lambda part: part[0])
        merged = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(first, second)]
        tiebreak += 1
        heapq.heappush(heap, (min(p[0] for p in merged) - max(p[0] for p in merged), tiebreak, merged))
    return [part[1] for part in heap[0][2]]


def _improved(shares: Sequence[Sequence[int]], seconds: Sequence[float]) -> list[list[int]]:
    """`shares` after moving a trial out of the fullest slot, or swapping one there for a shorter one elsewhere:
    each step the one that leaves the two slots' fuller one shortest, while that is at least MIN_GAIN_S shorter
    than the fullest was, for STEPS_PER_SLOT steps a slot at most (the steps' count bounds the planning's time)."""
    shares = [sorted(share, key=seconds.__getitem__) for share in shares]  # each slot's shortest first, to bisect
    for _ in range(STEPS_PER_SLOT * len(shares)):
        loads = [sum(seconds[i] for i in share) for share in shares]
        fullest_slot = max(range(len(shares)), key=loads.__getitem__)
        best = None  # (the two slots' fuller one after the step, trial out, trial in or None, other slot)
        for other, share in enumerate(shares):
            gap = loads[fullest_slot] - loads[other]
            if other == fullest_slot or gap <= MIN_GAIN_S:
                continue
            for out in shares[fullest_slot]:
                # The two slots come closest where the seconds moved are nearest half their gap: the trial in
                # that is nearest seconds[out] - gap / 2, on either side, or none.
                near = bisect.bisect_left(share, seconds[out] - gap / 2, key=seconds.__getitem__)
                for back in (None, *share[max(0, near - 1) : near + 1]):
                    moved = seconds[out] - (seconds[back] if back is not None else 0.0)
                    after = max(loads[fullest_slot] - moved, loads[other] + moved)
                    if moved > 0 and after < loads[fullest_slot] - MIN_GAIN_S and (best is None or after < best[0]):
                        best = (after, out, back, other)
        if best is None:
            break
        _, out, back, other = best
        shares[fullest_slot].remove(out)
        bisect.insort(shares[other], out, key=seconds.__getitem__)
        if back is not None:
            shares[other].remove(back)
            bisect.insort(shares[fullest_slot], back, key=seconds.__getitem__)
    return shares


def _handing_order(shares: Sequence[Sequence[int]], seconds: Sequence[float]) -> list[int]:
    """The trials in the order that hands each slot its share as it frees, were every trial to take its seconds."""
    order: list[int] = []
    next_in_share = [0] * len(shares)
    free = [(0.0, slot) for slot, share in enumerate(shares) if share]
    heapq.heapify(free)
    while free:
        at, slot = heapq.heappop(free)
        index = shares[slot][next_in_share[slot]]
        order.append(index)
        next_in_share[slot] += 1
        if next_in_share[slot] < len(shares[slot]):
            heapq.heappush(free, (at + seconds[index], slot))
    return order


def fullest(shares: Sequence[Sequence[int]], seconds: Sequence[float]) -> float:
    """The fullest slot's seconds."""
    return max(sum(seconds[i] for i in share) for share in shares)
