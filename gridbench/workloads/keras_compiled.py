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

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gridbench import compile_cache
from gridbench.datasets import Dataset
from gridbench.workloads import program_key, saved_programs
from gridbench.workloads.keras_common import (
    check_divisible_batch,
    data_parallel,
    keras_facts,
    loss_metrics,
    make_optimizer,
    normalise_device,
    precision_policy,
    set_random_seed,
)
from gridbench.workloads.programs import BUILD_LOCK, PROGRAMS, Program, program_tags

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
    """One trial's model on the compiled loop: build (data to device), compile, fit, evaluate.

    `build_model` returns the uncompiled Keras model; it runs under the trial's dtype policy.
    The compiled program comes from the worker's cache (gridbench.workloads.programs):
    a trial whose program key an earlier trial (or a compilation ahead) has compiled
    only builds a fresh model for its initial state (its seed, learning rate and
    dropout rate) and runs the same executable.
    """

    def __init__(
        self,
        hyperparameters: Mapping[str, Any],
        data: Dataset,
        seed: int,
        build_model: Callable[[], keras.Model],
        workload: str = "",
        keep_programs: bool = True,
    ):
        self.build_model = build_model
        # Its programs saved on disk for later workers (saved_programs): not a user's model, whose source can change.
        self.keep_programs = keep_programs
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.seed = seed
        self.batch_size = int(hyperparameters["batch_size"])
        self.steps = len(data.x_train) // self.batch_size
        if self.steps == 0:
            raise ValueError(f"batch_size {self.batch_size} is larger than the {len(data.x_train)} training samples")
        self.train_samples = self.steps * self.batch_size
        self.workload = workload
        self.state: tuple | None = None
        self.program: Program | None = None

    @property
    def program_key(self) -> tuple:
        """Everything the compiled executable depends on: program, data shapes, device, data parallelism."""
        x, y = self.data.x_train, self.data.y_train
        distribution = keras.distribution.distribution()
        devices = tuple(str(d) for d in jax.local_devices()) if distribution else (str(jax.local_devices()[0]),)
        return (
            self.workload,
            program_key(self.hyperparameters),
            x.shape,
            str(x.dtype),
            y.shape,
            self.data.num_classes,
            devices,
        )

    def _model_and_optimizer(self) -> tuple[keras.Model, keras.Optimizer]:
        return model_and_optimizer(self.build_model, self.hyperparameters)

    def build(self) -> None:
        with BUILD_LOCK:  # the seed, then the build that draws from it, with no compilation ahead between
            set_random_seed(self.seed)
            distribution = data_parallel()
            check_divisible_batch(self.batch_size, distribution)
            self.model, self.optimizer = self._model_and_optimizer()
        # The data live where the model does, copied once, outside the timed epochs.
        # Committing the state to that device too keeps the second epoch from compiling
        # again (the first epoch's outputs are committed; Keras' initial values are not).
        # Under data parallelism every device holds the weights and the training set
        # (replicated) and each batch is split over the devices.
        self.place = distribution_layouts(distribution) or jax.local_devices()[0]
        self.state = jax.device_put(state_of(self.model, self.optimizer), self.place)
        self.x_train = jax.device_put(self.data.x_train, self.place)
        self.y_train = jax.device_put(self.data.y_train.astype(np.int32), self.place)
        self.key = jax.device_put(jax.random.key(self.seed), self.place)
        wait_until_placed(self.state, self.key, self.x_train, self.y_train)

    def compile(self) -> dict[str, str]:
        """Takes the program from the worker's cache, compiling it if this trial is the first to need it."""
        key, arguments = self.program_key, self._arguments()
        compiling = partial(_compile, self.model, self.optimizer, arguments, self.steps, self.batch_size, self.place)
        lookup = PROGRAMS.get(
            key, lambda: saved_or_compiled(key, arguments, self.place, compiling, keep=self.keep_programs)
        )
        self.program = lookup.program
        return program_tags(lookup)

    def compile_detached(self) -> Program:
        """Compiles this session's program from shapes alone (no data on the device): for compiling ahead."""
        with BUILD_LOCK:
            model, optimizer = self._model_and_optimizer()
        place = jax.local_devices()[0]
        state = jax.device_put(state_of(model, optimizer), place)
        sharding = as_sharding(place)
        x, y = self.data.x_train, self.data.y_train
        arguments = (
            state,
            jax.device_put(jax.random.key(0), place),
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
            jax.ShapeDtypeStruct(y.shape, np.int32, sharding=sharding),
        )
        compiling = partial(_compile, model, optimizer, arguments, self.steps, self.batch_size, place)
        return saved_or_compiled(self.program_key, arguments, place, compiling, keep=self.keep_programs, ahead=True)

    def _arguments(self) -> tuple:
        return self.state, self.key, self.x_train, self.y_train

    def actual_device(self) -> str:
        return device_of(self.state, self.x_train)

    def sync(self) -> None:
        if self.state is not None:
            jax.block_until_ready(self.state)

    def fit(self, clock: PhaseClock) -> dict[str, float]:
        if self.program is None:  # not compiled in a phase of its own: compiling is the warm-up's part
            self.compile()
        losses = []
        for _ in range(int(self.hyperparameters["epochs"])):
            clock.epoch_begin()
            self.state, self.key, loss = self.program.train_epoch(self.state, self.key, self.x_train, self.y_train)
            clock.epoch_end()
            losses.append(loss)
        self._write_back()
        return loss_metrics(losses)  # train_loss, and diverged_epoch if an epoch's mean loss was NaN or inf

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
        chunks = eval_chunks(self.data.x_test, self.data.y_test, self.place)
        correct = sum(int(self.program.correct(trainable, non_trainable, *chunk)) for chunk in chunks)
        return {"test_accuracy": correct / len(self.data.x_test)}

    def facts(self) -> dict[str, str]:
        return {**keras_facts(self.model), "train_loop": "compiled", "steps_per_execution": str(self.steps)}


def wait_until_placed(*placed) -> None:
    """Returns once `placed` are on their device: a build's copies are the trial's setup.

    JAX copies a host array after device_put has returned, on a CPU too: mnist's training set took 0.068-0.086 s more
    on 2 cores. Left running, the copy was timed in the program's load (compile_s, where the setup phase ended
    without waiting) or the first epoch (docs/results/around-training.md, "twenty-third").
    """
    jax.block_until_ready(placed)


def model_and_optimizer(
    build_model: Callable[[], keras.Model], hyperparameters: Mapping[str, Any]
) -> tuple[keras.Model, keras.Optimizer]:
    """A fresh model under the trial's dtype policy and its built optimizer (loss-scaled under mixed_float16,
    as compile() would)."""
    with precision_policy(hyperparameters):
        model = build_model()
    return model, optimizer_for(model, hyperparameters)


def optimizer_for(model: keras.Model, hyperparameters: Mapping[str, Any]) -> keras.Optimizer:
    """A fresh optimizer built for `model`'s weights (loss-scaled under mixed_float16, as compile() would)."""
    optimizer = make_optimizer(hyperparameters)
    if model.dtype_policy.name == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)
    return optimizer


def device_of(state: tuple, x_train) -> str:
    """Where the weights and the training data are; they must agree."""
    weights, data = normalise_device(state[0][0]), normalise_device(x_train)
    if weights != data:
        raise RuntimeError(f"weights on {weights} but training data on {data}")
    return weights


def eval_chunks(x: np.ndarray, y: np.ndarray, place):
    """The test set in full chunks of EVAL_BATCH on `place`, so that evaluation compiles once.

    The last chunk is padded with label -1, which no prediction matches.
    """
    padding = -len(x) % EVAL_BATCH
    x = np.concatenate([x, np.zeros((padding, *x.shape[1:]), x.dtype)])
    y = np.concatenate([y.astype(np.int32), np.full(padding, -1, np.int32)])
    for i in range(0, len(x), EVAL_BATCH):
        yield jax.device_put((x[i : i + EVAL_BATCH], y[i : i + EVAL_BATCH]), place)


def evaluation_arguments(arguments: tuple, place) -> tuple:
    """What the evaluation is called with, given an epoch's `arguments`: the weights and a chunk on `place`."""
    (trainable, non_trainable, _), _, x_train, _ = arguments
    sharding = as_sharding(place)
    chunk = jax.ShapeDtypeStruct((EVAL_BATCH, *x_train.shape[1:]), x_train.dtype, sharding=sharding)
    labels = jax.ShapeDtypeStruct((EVAL_BATCH,), np.int32, sharding=sharding)
    return trainable, non_trainable, chunk, labels


def program_arguments(arguments: tuple, place) -> dict[str, tuple]:
    """Each of a Program's executables' arguments (saved_programs checks a saved one takes them)."""
    return {"train_epoch": arguments, "correct": evaluation_arguments(arguments, place)}


def saved_or_compiled(
    key: tuple, arguments: tuple, place, compiling: Callable[..., Program], *, keep: bool, ahead: bool = False
) -> Program:
    """`key`'s program: its saved executables where they take `arguments` (an epoch's), else compiling(tag, ahead)
    and saved (saved_programs.ready_or_compile); for a session's and a group's program alike."""
    return saved_programs.ready_or_compile(
        key, program_arguments(arguments, place), place, lambda tag: compiling(tag, ahead), ahead=ahead, keep=keep
    )


def evaluation_compiler_options(place) -> dict[str, Any] | None:
    """XLA's options for the evaluation on `place`: compile_cache.EVALUATION_GPU_OPTIONS on a GPU, XLA's defaults
    elsewhere."""
    platforms = {device.platform for device in as_sharding(place).device_set}
    return dict(compile_cache.EVALUATION_GPU_OPTIONS) if platforms <= {"gpu", "cuda", "rocm"} else None


def compile_evaluation(correct: Callable, arguments: tuple, place, tag: str | None = None):
    """`correct` (a chunk's correct predictions) compiled for `arguments`' weights and a chunk on `place`."""
    lowered = jax.jit(saved_programs.tagged(correct, tag)).lower(*evaluation_arguments(arguments, place))
    return lowered.compile(evaluation_compiler_options(place))


def state_of(model: keras.Model, optimizer: keras.Optimizer) -> tuple:
    return (
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in optimizer.variables],
    )


def _compile(
    model: keras.Model,
    optimizer: keras.Optimizer,
    arguments: tuple,
    steps: int,
    batch_size: int,
    place,
    tag: str | None = None,
    ahead: bool = False,
) -> Program:
    """Traces and compiles one epoch and the evaluation chunk for `arguments`' shapes and placement.

    The model and optimizer only give the program its structure: any state of the
    same structure (another seed, learning rate or dropout rate) runs through it.
    `tag` ends the executables' names (saved_programs.ready_or_compile).
    """
    start, cache = time.perf_counter(), compile_cache.mark()
    distribution = keras.distribution.distribution()
    step = make_train_step(model, optimizer, keras.losses.SparseCategoricalCrossentropy())
    shard = (lambda batch: batch) if distribution is None else _batch_sharder(distribution)
    # Donating the state lets XLA update the weights in place.
    epoch = saved_programs.tagged(make_train_epoch(step, steps, batch_size, shard), tag)
    train_epoch = jax.jit(epoch, donate_argnums=0).lower(*arguments).compile()
    correct = compile_evaluation(make_correct_count(model), arguments, place, tag)
    return Program(train_epoch, correct, time.perf_counter() - start, ahead, cached=compile_cache.all_loaded(cache))


def as_sharding(place) -> jax.sharding.Sharding:
    """A device (one-device trials) or a layout (data parallelism), as a sharding."""
    return place if isinstance(place, jax.sharding.Sharding) else jax.sharding.SingleDeviceSharding(place)
