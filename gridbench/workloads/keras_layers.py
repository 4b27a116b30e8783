"""Layers whose tuned values are state, not program: one traced program serves every value.

Keras' Dropout keeps its rate as a Python float, so XLA (or tf.function) bakes it
into the program, and every dropout value of a grid compiles its own. Here the
rate is a non-trainable variable: it travels with the weights (in the stateless
API's non_trainable state), so trials of a search that differ only in dropout
share one compiled program (gridbench.workloads.programs), and fused trials
(jax.vmap) can each carry their own rate.
"""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="gridbench")
class TunableDropout(keras.layers.Layer):
    """Keras' Dropout (inverted dropout: scaled by 1/(1 - rate) in training), with the rate as a variable."""

    def __init__(self, rate: float, seed: int | None = None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.initial_rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.supports_masking = True

    def build(self, input_shape):
        self.rate = self.add_weight(
            shape=(),
            initializer=keras.initializers.Constant(self.initial_rate),
            trainable=False,
            dtype="float32",
            name="rate",
        )

    def call(self, inputs, training=False):
        if not training:
            return inputs
        # float32 for the draw: under a mixed policy TensorFlow reads the variable in the compute dtype.
        rate = ops.cast(self.rate, "float32")
        keep = keras.random.uniform(ops.shape(inputs), seed=self.seed_generator, dtype="float32") >= rate
        return ops.where(keep, inputs / ops.cast(1 - rate, inputs.dtype), ops.zeros_like(inputs))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.initial_rate, "seed": self.seed}


def set_dropout_rates(model: keras.Model, rate: float) -> None:
    """Sets every TunableDropout of `model` (the `dropout` hyperparameter's layers) to `rate`."""
    for layer in tunable_dropouts(model):
        layer.rate.assign(rate)


def tunable_dropouts(model: keras.Model) -> list[TunableDropout]:
    return [layer for layer in model._flatten_layers() if isinstance(layer, TunableDropout)]


def parameter_count(model: keras.Model) -> int:
    """The model's weights as Keras counts them, less the dropout rates held here as variables."""
    return model.count_params() - len(tunable_dropouts(model))
