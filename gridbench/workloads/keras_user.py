"""A user's Keras model as a workload entry: the families' Entry, with the user's builder.

It opens the same sessions as the built-in families (Keras fit, or the compiled loop),
so loops, packing and program reuse apply to it unchanged. Imported inside a trial.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Callable, Mapping

import keras

from gridbench.workloads.keras_model import Entry
from gridbench.workloads.user_model import import_callable


def resolve_builder(model_builder) -> Callable:
    """The builder function, from itself or from ("module:function", folder)."""
    if callable(model_builder):
        return model_builder
    reference, base_dir = model_builder
    return import_callable(reference, base_dir, "model")


class UserEntry(Entry):
    """Entry's sessions around the user's `build(hp)`, which knows its own input shape and classes."""

    keeps_programs = False  # its source can change under the same name: traced each time (JAX's cache still serves)

    def __init__(self, model_builder):
        # Names the model in its programs' keys (gridbench.workloads.programs).
        self.family = getattr(model_builder, "__qualname__", None) or str(model_builder[0])
        self._model_builder = model_builder
        self._builder: Callable | None = None

    def build(self, hyperparameters: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
        if self._builder is None:
            self._builder = resolve_builder(self._model_builder)
        return self._builder(MappingProxyType(dict(hyperparameters)))
