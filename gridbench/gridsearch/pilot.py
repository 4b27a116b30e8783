"""A pilot: the verdict before the search. One configuration per program, for a few epochs, on each device.

    spec (as written) -> one configuration per program (learning rate, dropout: their first value;
    epochs: the pilot's) -> a short search per device -> gridbench.comparison.pilot projects the whole

Configurations that share a program (gridbench.workloads.program_key: everything but
the runtime hyperparameters and the epochs) cost the same per epoch and per trial;
learning rate and dropout change what is learned, not the time. So each program's pilot trial stands for
every configuration that shares it. The pilot's run records the whole search as written
(its epochs, configurations, repeats, trials at once, and how many configurations each
program stands for), so that the projection needs nothing else, and a later run of the
whole search can be checked against it. Nothing here imports Ray or a framework.
"""

from __future__ import annotations

import json
from typing import Any

from gridbench.errors import UserError
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.records import config_key, params_key
from gridbench.workloads import RUNTIME_HYPERPARAMETERS, UNTRACED_HYPERPARAMETERS

DEFAULT_EPOCHS = 3  # the warm-up epoch and two steady ones


def parse(text: str | None) -> int:
    """--pilot [epochs=N]: the pilot's epochs; refused below 2 (no steady epoch to scale)."""
    if not text:
        return DEFAULT_EPOCHS
    key, sep, value = text.partition("=")
    if key.strip() != "epochs" or not sep or not value.strip().isdigit():
        raise UserError(f"--pilot {text!r}: give epochs=N, e.g. --pilot epochs=3 (or --pilot alone for 3)")
    epochs = int(value)
    if epochs < 2:
        raise UserError(f"--pilot epochs={epochs}: a pilot needs 2 epochs at least (the first is warm-up, no steady)")
    return epochs


def check(spec: ExperimentSpec, resume: bool) -> None:
    """What a pilot cannot stand for, refused before anything runs."""
    if resume:
        raise UserError("--pilot runs a new, short search; it cannot --resume one: drop --pilot or --resume")
    if spec.workload.framework != "keras" or "epochs" not in spec.params:
        raise UserError(
            f"--pilot projects Keras searches of a fixed number of epochs; {spec.name} ({spec.workload.name}) is not "
            f"one: run the whole search"
        )
    if spec.execution == "fused":
        raise UserError(
            "--pilot projects one trial per configuration; a fused group's cost depends on its size: drop "
            "--execution fused for the pilot, or run the whole fused search"
        )


def programs(spec: ExperimentSpec) -> dict[str, int]:
    """Each program's pilot configuration (its key: the program's axes only) and how many of the whole search's
    configurations it stands for."""
    runtime = RUNTIME_HYPERPARAMETERS | UNTRACED_HYPERPARAMETERS
    counts: dict[str, int] = {}
    for config in spec.configurations():
        shown = config_key({axis: value for axis, value in config.items() if axis not in runtime})
        counts[shown] = counts.get(shown, 0) + 1
    return counts


def pilot_spec(spec: ExperimentSpec, epochs: int) -> ExperimentSpec:
    """The pilot: every axis that decides a program as written; the runtime axes at their first value; `epochs`
    epochs; one repeat."""
    runtime = RUNTIME_HYPERPARAMETERS | UNTRACED_HYPERPARAMETERS
    sets = {axis: str(spec.grid[axis][0]) for axis in spec.grid if axis in runtime}
    return spec.with_overrides(sets={**sets, "epochs": str(epochs)}).with_repeats(1)


def tags(spec: ExperimentSpec, whole_params: dict[str, Any], concurrency: int) -> dict[str, str]:
    """The pilot run's tags: that it is one, and the whole search it stands for (`whole_params`: its parameters
    as it will record them, from whole_params below)."""
    whole = {
        "epochs": int(spec.params["epochs"]),
        "configs": spec.grid_size,
        "repeats": spec.repeats,
        "concurrency": concurrency,
        "programs": programs(spec),
    }
    return {
        schema.PILOT: "true",
        schema.PILOT_WHOLE: json.dumps(whole, sort_keys=True),
        schema.PILOT_WHOLE_KEY: params_key(whole_params),
    }


def describe(spec: ExperimentSpec, epochs: int) -> str:
    """What the pilot runs, in one line."""
    found = programs(spec)
    whole = f"{spec.grid_size} configurations x {spec.params['epochs']} epochs x {spec.repeats} repeat(s)"
    if len(found) == 1:
        return (
            f"pilot: the grid has one program, so the pilot is that program's configuration for {epochs} epochs; "
            f"it projects the whole search's epochs and repeats ({whole})"
        )
    return f"pilot: {len(found)} programs, one configuration each for {epochs} epochs, for the whole search ({whole})"


def whole_params(whole: ExperimentSpec, resolved: ExperimentSpec, params: dict[str, Any]) -> dict[str, Any]:
    """The whole search's parameters (`params`, as recorded) with what planning resolved for the pilot (the
    training loop's "auto", say) resolved alike: the parameters the whole search will record when it runs."""
    found = dict(params)
    for key, value in resolved.params.items():
        if key in whole.params and key != "epochs" and key not in whole.grid:
            found[key] = value
    for axis, values in resolved.grid.items():
        found[f"{schema.GRID_PREFIX}{axis}"] = list(values)
    return found
