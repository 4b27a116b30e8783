"""The order in which Tune starts a search's trials: the grid's, or longest first where their times are known.

    grid order (gridsearch.tuning) -> Tune points -> [each trial's own time at an earlier count] -> longest first

With several trials at once, the order decides how the last ones line up: in grid order a long
trial can start last and run alone while the other slots stand idle. `scale` measures every
trial at its first count, so at the later counts its trials start longest first by those
times (a greedy rule that leaves a short tail: each slot takes the longest trial left). Where
the first count runs one trial at a time, its makespan does not depend on the order; where it
runs several (packed trials, `--cpus 2,...`), it ran in the grid's order, and the later counts'
speedup holds the order's gain too (scale's report says so).
"""

from __future__ import annotations

from typing import Any, Collection, Sequence

from gridbench.gridsearch.plan import SearchPlan
from gridbench.tracking import schema
from gridbench.tracking.records import TrialRecord, config_key
from gridbench.trial import REPEAT_KEY

LONGEST_FIRST = "longest first, by each trial's epochs and evaluation at the first count"


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


def longest_first(plan: SearchPlan, measured: Sequence[TrialRecord]) -> tuple[dict[str, Any], ...]:
    """The plan's points, longest first by `measured` trials of the same grid; () where the order cannot be told
    (fused groups, a workload's inner axis, a point with no finished trial)."""
    if plan.fused_groups or plan.spec.workload.inner_axis:
        return ()
    times = {(config_key(t.config), t.repeat): own_time(t) for t in measured if t.finished}
    ordered = points(plan)
    keys = [(config_key({k: v for k, v in p.items() if k != REPEAT_KEY}), p[REPEAT_KEY]) for p in ordered]
    if any(key not in times for key in keys):
        return ()
    return tuple(p for _, p in sorted(zip(keys, ordered), key=lambda item: -times[item[0]]))
