"""Keras `fit` models kept per worker, so that trials of one program trace `fit`'s step once.

Keras traces its training step (`model.train_function`: a jax.jit or tf.function)
on a model's first `fit`, in that trial's warm-up epoch, and keeps it on the model.
A later trial in the same worker whose key matches (workload, program key, data
shapes, backend: see `fit_program_key`) trains the kept model instead of its own:
its freshly built model, built with its own seed, only lends its initial state.
Every variable is copied (`model.variables`: weights, non-trainable statistics,
TunableDropout rates and the seed generators' state), and the optimizer starts
afresh with the trial's learning rate. The kept step is then called again, not
traced: the warm-up epoch of a reused program is what shows the saving (fit has
no compile phase of its own to time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import keras

from gridbench.datasets import Dataset
from gridbench.workloads import program_key
from gridbench.workloads.keras_common import make_optimizer
from gridbench.workloads.keras_layers import set_dropout_rates
from gridbench.workloads.programs import PROGRAMS


@dataclass
class KeptFitModel:
    """A compiled Keras model whose `fit` step is traced (or about to be, by the trial that built it)."""

    model: keras.Model


def fit_program_key(workload: str, hyperparameters: Mapping[str, Any], data: Dataset) -> tuple:
    """What a `fit` step's trace depends on: the program key, the data's shapes and dtypes, the backend."""
    x, y = data.x_train, data.y_train
    return (
        "fit",
        workload,
        program_key(dict(hyperparameters)),
        x.shape,
        str(x.dtype),
        y.shape,
        str(y.dtype),
        data.num_classes,
        keras.backend.backend(),
    )


def take_model(
    key: tuple, fresh: keras.Model, hyperparameters: Mapping[str, Any], first_batch: tuple
) -> tuple[keras.Model, bool]:
    """The model a trial trains, and whether it is a kept one (its traced step reused).

    `fresh` is the trial's own model, built with its seed and compiled. The first
    trial of a key trains it, and it is kept; a later one trains the kept model,
    reset to `fresh`'s initial state. `first_batch` is (x, y) as `fit` will see them.
    """
    lookup = PROGRAMS.get(key, lambda: KeptFitModel(fresh))
    kept: KeptFitModel = lookup.program
    if lookup.reused and kept.model.train_function is not None and kept.model.optimizer.built:
        reset_state(kept.model, fresh, hyperparameters)
        return kept.model, True
    # First of its key, or an earlier trial failed before its first step (nothing traced to reuse).
    kept.model = fresh
    build_for_fit(fresh, first_batch)
    return fresh, False


def build_for_fit(model: keras.Model, first_batch: tuple) -> None:
    """Creates the optimizer's, loss's and metrics' state now, as `fit` would on its first call.

    Called on a model that will be kept, so that its first `fit` does what a kept
    model's does. Otherwise, on JAX, `fit` draws a batch from its shuffled iterator
    to build them (Trainer._symbolic_build), which advances NumPy's global random
    state: a fresh trial then shuffled its epochs differently from a reused one.
    """
    model._symbolic_build(data_batch=first_batch)


def reset_state(kept: keras.Model, fresh: keras.Model, hyperparameters: Mapping[str, Any]) -> None:
    """Gives `kept` the initial state of `fresh`: every variable, and a new optimizer state."""
    _assign_all(kept.variables, fresh.variables, "model")
    if "dropout" in hyperparameters:  # copied above already; the trial's rate, as CompiledSession sets it
        set_dropout_rates(kept, float(hyperparameters["dropout"]))
    optimizer = trial_optimizer(kept.optimizer, hyperparameters)
    optimizer.build(kept.trainable_variables)  # the kept optimizer's variables, in its order, at their initial values
    _assign_all(kept.optimizer.variables, optimizer.variables, "optimizer")


def trial_optimizer(kept: keras.Optimizer, hyperparameters: Mapping[str, Any]) -> keras.Optimizer:
    """A new optimizer of the kept one's kind, with the trial's learning rate.

    Under mixed_float16 compile() wrapped the kept one in a LossScaleOptimizer:
    so is this one, with compile()'s defaults (its loss scale starts afresh too).
    """
    optimizer = make_optimizer(hyperparameters)
    wrapped = isinstance(kept, keras.optimizers.LossScaleOptimizer)
    inner = kept.inner_optimizer if wrapped else kept
    if type(inner) is not type(optimizer):
        kinds = f"{type(inner).__name__}, the trial's {type(optimizer).__name__}"
        raise RuntimeError(f"a kept model's optimizer is {kinds}")
    return keras.optimizers.LossScaleOptimizer(optimizer) if wrapped else optimizer


def _assign_all(targets: list, sources: list, what: str) -> None:
    if len(targets) != len(sources):
        raise RuntimeError(f"a kept {what} has {len(targets)} variables but the trial's has {len(sources)}")
    for target, source in zip(targets, sources):
        if tuple(target.shape) != tuple(source.shape):
            raise RuntimeError(f"a kept {what}'s {target.path} has shape {target.shape}, the trial's {source.shape}")
        target.assign(source.value)
