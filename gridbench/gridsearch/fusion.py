"""Fused execution, planned: which configurations train together as one vectorised program, and what may fuse.

    spec (configurations x repeats) -> groups of one program each -> one Ray trial per group

A group's members share everything that shapes the traced program
(gridbench.workloads.program_key) and their epoch count; they differ in values held
as state (learning rate, dropout rate, seed). Repeat r of a configuration keeps the
seed spec.seed + r that it has as a trial of its own, so that fused and unfused
searches compare one to one. Pure functions: nothing here imports a framework.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, Mapping

from gridbench.errors import UserError
from gridbench.workloads import TRAIN_LOOP, program_key

# Convolutional and dense models. mlp and cnn: fused against alone in tests/test_fused.py (digits);
# smallcnn and vgg (the same kinds of layers) gave identical losses fused and alone on CIFAR-10-shaped data.
FUSABLE_MODELS = ("mlp", "cnn", "smallcnn", "vgg")
FUSED_BACKENDS = ("jax",)

# One member of a group: its grid point (axis values only) and its repeat.
Member = tuple[Mapping[str, Any], int]


def fused_groups(
    configurations: list[dict[str, Any]], params: Mapping[str, Any], repeats: int
) -> tuple[tuple[Member, ...], ...]:
    """Configurations x repeats in groups that share one program; groups and members in grid order.

    The group key is the program key, the epoch count (members train in step), and,
    where each repeat trains on its own seeded subset (train_size), the repeat.
    """
    groups: dict[tuple, list[Member]] = {}
    for config in configurations:
        hyperparameters = {**params, **config}
        for repeat in range(repeats):
            subset = repeat if int(hyperparameters.get("train_size", 0) or 0) else None
            key = (program_key(hyperparameters), hyperparameters.get("epochs"), subset)
            groups.setdefault(key, []).append((dict(config), repeat))
    return tuple(tuple(members) for members in groups.values())


def check_fusable(model: str, framework: str, gpus_per_trial: float) -> None:
    """What needs no backend: the model, and one device per group. Raises UserError."""
    if framework != "keras" or model not in FUSABLE_MODELS:
        raise UserError(
            f"--execution fused trains {', '.join(FUSABLE_MODELS)} models; model {model} cannot fuse: "
            f"use --execution trials"
        )
    if gpus_per_trial > 1:
        raise UserError(
            f"--execution fused trains each group on one device; --gpus-per-trial {gpus_per_trial:g} asks for "
            f"data parallelism: use --gpus-per-trial 1 or below"
        )


def fused_loops(
    params: Mapping[str, Any], grid: Mapping[str, tuple], backend: str
) -> tuple[Mapping[str, Any], Mapping[str, tuple]]:
    """The spec's params and grid with train_loop "auto" meaning the compiled loop (on CPU too); refuses fit."""
    if backend not in FUSED_BACKENDS:
        raise UserError(
            f"--execution fused needs --backend {' or '.join(FUSED_BACKENDS)} (jax.vmap over the compiled loop); "
            f"got {backend}: add --backend jax, or use --execution trials"
        )
    loops = set(grid.get(TRAIN_LOOP, ())) | ({params[TRAIN_LOOP]} if TRAIN_LOOP in params else set())
    if "fit" in loops:
        raise UserError(
            "--execution fused trains on the compiled loop; train_loop=fit cannot fuse: "
            "drop train_loop=fit (auto means compiled under fused), or use --execution trials"
        )
    params = {**params, TRAIN_LOOP: "compiled"} if TRAIN_LOOP in params else dict(params)
    grid = dict(grid)
    if TRAIN_LOOP in grid:
        if len(grid[TRAIN_LOOP]) > 1:
            raise UserError(
                f"--execution fused trains on the compiled loop only; grid axis {TRAIN_LOOP!r} "
                f"{list(grid[TRAIN_LOOP])} would repeat it: fix {TRAIN_LOOP} with --set, or use --execution trials"
            )
        grid[TRAIN_LOOP] = ("compiled",)
    return params, grid


def fused_spec(spec, backend: str):
    """`spec` as a fused search runs it: every loop the compiled one (see fused_loops)."""
    params, grid = fused_loops(spec.params, spec.grid, backend)
    return replace(spec, params=MappingProxyType(params), grid=MappingProxyType(grid))
