"""The Keras MLP trained by a compiled loop: the same model, at the speed the hardware allows.

Keras `fit` feeds batches from host memory and dispatches a step (or a few) per
call; on a GPU that leaves the device idle most of the time for a small model.
Here the training set is copied to the device once (during setup), and each epoch
is one call of a jit-compiled function: a shuffle, then a `lax.scan` over every
step through Keras' stateless API (`model.stateless_call`,
`optimizer.stateless_apply`). Model definition, initialisation, dropout,
optimizer and loss are Keras' own, so only the loop differs from `fit`:

- each epoch trains on floor(n / batch_size) full batches of a fresh shuffle; the
  last partial batch is dropped so that every step has one shape (`train_samples`
  counts the samples actually trained on);
- the reported loss is the mean over the epoch's steps, as `fit` reports it.

JAX backend only (gridbench.workloads.resolve_train_loop refuses the others).
"""

from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gridbench.datasets import Dataset
from gridbench.timing import PhaseClock
from gridbench.workloads.keras_mlp import build_mlp, keras_facts, normalise_device

OPTIMIZERS = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop, "sgd": keras.optimizers.SGD}


def make_train_step(model: keras.Model, optimizer: keras.Optimizer, loss_fn: keras.losses.Loss):
    """One optimisation step as a pure function of (state, x, y) -> (state, loss)."""

    def loss_of(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, y_pred), non_trainable

    gradient = jax.value_and_grad(loss_of, has_aux=True)

    def train_step(state, x, y):
        trainable, non_trainable, optimizer_state = state
        (loss, non_trainable), grads = gradient(trainable, non_trainable, x, y)
        trainable, optimizer_state = optimizer.stateless_apply(optimizer_state, grads, trainable)
        return (trainable, non_trainable, optimizer_state), loss

    return train_step


def make_train_epoch(train_step, steps: int, batch_size: int):
    """A whole epoch as one function: shuffle, then `steps` steps in one lax.scan.

    The data arrive as arguments, not closed over, so that XLA does not embed the
    training set in the compiled program as a constant.
    """

    def train_epoch(state, key, x_all, y_all):
        key, shuffle_key = jax.random.split(key)
        order = jax.random.permutation(shuffle_key, x_all.shape[0])[: steps * batch_size]

        def one_step(state, indices):
            return train_step(state, jnp.take(x_all, indices, axis=0), jnp.take(y_all, indices, axis=0))

        state, losses = jax.lax.scan(one_step, state, order.reshape(steps, batch_size))
        return state, key, losses.mean()

    return train_epoch


def make_accuracy(model: keras.Model):
    def accuracy(trainable, non_trainable, x, y):
        y_pred, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return jnp.mean(jnp.argmax(y_pred, axis=-1) == y)

    return accuracy


class CompiledMLPSession:
    """One trial's model on the compiled loop: build (data to device), fit, evaluate."""

    def __init__(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.seed = seed
        self.batch_size = int(hyperparameters["batch_size"])
        self.steps = len(data.x_train) // self.batch_size
        if self.steps == 0:
            raise ValueError(f"batch_size {self.batch_size} is larger than the {len(data.x_train)} training samples")
        self.train_samples = self.steps * self.batch_size
        self.state: tuple | None = None

    def build(self) -> None:
        hp = self.hyperparameters
        keras.utils.set_random_seed(self.seed)
        meta = {"n_features_in_": self.data.x_train.shape[1], "n_classes_": self.data.num_classes}
        self.model = build_mlp(hp["hidden_units"], hp["hidden_layers"], hp["dropout"], meta)
        self.optimizer = OPTIMIZERS[hp["optimizer"]](learning_rate=hp["learning_rate"])
        self.optimizer.build(self.model.trainable_variables)
        loss_fn = keras.losses.SparseCategoricalCrossentropy()
        state = (
            [v.value for v in self.model.trainable_variables],
            [v.value for v in self.model.non_trainable_variables],
            [v.value for v in self.optimizer.variables],
        )
        # The data live where the model does, copied once, outside the timed epochs.
        # Committing the state to that device too keeps the second epoch from compiling
        # again (the first epoch's outputs are committed; Keras' initial values are not).
        device = next(iter(state[0][0].devices()))
        self.state = jax.device_put(state, device)
        self.x_train = jax.device_put(self.data.x_train, device)
        self.y_train = jax.device_put(self.data.y_train.astype(np.int32), device)
        self.key = jax.device_put(jax.random.key(self.seed), device)
        step = make_train_step(self.model, self.optimizer, loss_fn)
        # Donating the state lets XLA update the weights in place.
        self._train_epoch = jax.jit(make_train_epoch(step, self.steps, self.batch_size), donate_argnums=0)
        self._accuracy = jax.jit(make_accuracy(self.model))

    def actual_device(self) -> str:
        """Where the weights and the training data are; they must agree."""
        weights, data = normalise_device(self.state[0][0]), normalise_device(self.x_train)
        if weights != data:
            raise RuntimeError(f"weights on {weights} but training data on {data}")
        return weights

    def sync(self) -> None:
        if self.state is not None:
            jax.block_until_ready(self.state)

    def fit(self, clock: PhaseClock) -> dict[str, float]:
        losses = []
        for _ in range(int(self.hyperparameters["epochs"])):
            clock.epoch_begin()
            self.state, self.key, loss = self._train_epoch(self.state, self.key, self.x_train, self.y_train)
            clock.epoch_end()
            losses.append(loss)
        self._write_back()
        return {"train_loss": float(losses[-1])}

    def _write_back(self) -> None:
        """Leaves the trained weights in the Keras model, as fit would."""
        trainable, non_trainable, optimizer_state = self.state
        for variables, values in (
            (self.model.trainable_variables, trainable),
            (self.model.non_trainable_variables, non_trainable),
            (self.optimizer.variables, optimizer_state),
        ):
            for variable, value in zip(variables, values):
                variable.assign(value)

    def evaluate(self) -> dict[str, float]:
        trainable, non_trainable, _ = self.state
        accuracy = self._accuracy(trainable, non_trainable, self.data.x_test, self.data.y_test.astype(np.int32))
        return {"test_accuracy": float(accuracy)}

    def facts(self) -> dict[str, str]:
        return {**keras_facts(), "train_loop": "compiled", "steps_per_execution": str(self.steps)}
