"""A Keras model trained by a compiled loop: the same model, at the speed the hardware allows.

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
- the reported loss is the mean over the epoch's steps, as `fit` reports it;
- under mixed_float16 the optimizer is wrapped in Keras' LossScaleOptimizer and the
  loss scaled before differentiation, as `compile` and `fit` do.

JAX backend only (gridbench.workloads.resolve_train_loop refuses the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gridbench.datasets import Dataset
from gridbench.workloads.keras_common import (
    check_divisible_batch,
    data_parallel,
    keras_facts,
    make_optimizer,
    normalise_device,
    precision_policy,
)

if TYPE_CHECKING:  # the clock is the trial's; a workload only calls it
    from gridbench.trial.timing import PhaseClock


def make_train_step(model: keras.Model, optimizer: keras.Optimizer, loss_fn: keras.losses.Loss):
    """One optimisation step as a pure function of (state, x, y) -> (state, loss)."""

    def loss_of(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        loss = loss_fn(y, y_pred)
        # The identity, except for a LossScaleOptimizer (mixed_float16).
        return optimizer.scale_loss(loss), (loss, non_trainable)

    gradient = jax.value_and_grad(loss_of, has_aux=True)

    def train_step(state, x, y):
        trainable, non_trainable, optimizer_state = state
        (_, (loss, non_trainable)), grads = gradient(trainable, non_trainable, x, y)
        trainable, optimizer_state = optimizer.stateless_apply(optimizer_state, grads, trainable)
        return (trainable, non_trainable, optimizer_state), loss

    return train_step


def make_train_epoch(train_step, steps: int, batch_size: int, shard=lambda batch: batch):
    """A whole epoch as one function: shuffle, then `steps` steps in one lax.scan.

    The data arrive as arguments, not closed over, so that XLA does not embed the
    training set in the compiled program as a constant. `shard` places each batch
    (split over the data-parallel devices; by default as it is).
    """

    def train_epoch(state, key, x_all, y_all):
        key, shuffle_key = jax.random.split(key)
        order = jax.random.permutation(shuffle_key, x_all.shape[0])[: steps * batch_size]

        def one_step(state, indices):
            return train_step(state, shard(jnp.take(x_all, indices, axis=0)), shard(jnp.take(y_all, indices, axis=0)))

        state, losses = jax.lax.scan(one_step, state, order.reshape(steps, batch_size))
        return state, key, losses.mean()

    return train_epoch


def make_correct_count(model: keras.Model):
    def correct(trainable, non_trainable, x, y):
        y_pred, _ = model.stateless_call(trainable, non_trainable, x, training=False)
        return jnp.sum(jnp.argmax(y_pred, axis=-1) == y)

    return correct


EVAL_BATCH = 1024  # test samples per call: bounds activation memory for deep models and packed trials


def distribution_layouts(distribution):
    """The replicated placement of Keras' DataParallel mesh, or None without one."""
    if distribution is None:
        return None
    return keras.distribution.TensorLayout([], distribution.device_mesh).backend_layout


def _batch_sharder(distribution):
    def shard(batch):
        layout = distribution.get_data_layout(batch.shape).backend_layout
        return jax.lax.with_sharding_constraint(batch, layout)

    return shard


class CompiledSession:
    """One trial's model on the compiled loop: build (data to device), fit, evaluate.

    `build_model` returns the uncompiled Keras model; it runs under the trial's dtype policy.
    """

    def __init__(
        self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int, build_model: Callable[[], keras.Model]
    ):
        self.build_model = build_model
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
        keras.utils.set_random_seed(self.seed)
        distribution = data_parallel()
        check_divisible_batch(self.batch_size, distribution)
        with precision_policy(self.hyperparameters):
            self.model = self.build_model()
        self.optimizer = make_optimizer(self.hyperparameters)
        if self.model.dtype_policy.name == "mixed_float16":
            self.optimizer = keras.optimizers.LossScaleOptimizer(self.optimizer)
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
        # Under data parallelism every device holds the weights and the training set
        # (replicated) and each batch is split over the devices.
        place = distribution_layouts(distribution) or next(iter(state[0][0].devices()))
        self.state = jax.device_put(state, place)
        self.x_train = jax.device_put(self.data.x_train, place)
        self.y_train = jax.device_put(self.data.y_train.astype(np.int32), place)
        self.key = jax.device_put(jax.random.key(self.seed), place)
        step = make_train_step(self.model, self.optimizer, loss_fn)
        shard = (lambda batch: batch) if distribution is None else _batch_sharder(distribution)
        # Donating the state lets XLA update the weights in place.
        self._train_epoch = jax.jit(make_train_epoch(step, self.steps, self.batch_size, shard), donate_argnums=0)
        self._correct = jax.jit(make_correct_count(self.model))

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
        x, y = self.data.x_test, self.data.y_test.astype(np.int32)
        # Every call gets a full chunk, so that evaluation compiles once: the last is padded
        # with label -1, which no prediction matches.
        padding = -len(x) % EVAL_BATCH
        x = np.concatenate([x, np.zeros((padding, *x.shape[1:]), x.dtype)])
        y = np.concatenate([y, np.full(padding, -1, np.int32)])
        correct = sum(
            int(self._correct(trainable, non_trainable, x[i : i + EVAL_BATCH], y[i : i + EVAL_BATCH]))
            for i in range(0, len(x), EVAL_BATCH)
        )
        return {"test_accuracy": correct / len(self.data.x_test)}

    def facts(self) -> dict[str, str]:
        return {**keras_facts(self.model), "train_loop": "compiled", "steps_per_execution": str(self.steps)}
