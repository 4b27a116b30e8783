"""Several configurations of one program trained at once: the compiled loop under jax.vmap.

Configurations that share a program (gridbench.workloads.program_key) differ only
in values held as state: the weights' initialisation (the seed), the dropout rate
(TunableDropout's variable, in the non-trainable state), the learning rate (one
of the optimizer's variables) and the shuffle key. Each member's model and
optimizer are built as CompiledSession builds them, with the member's own seed
and hyperparameters; their states are stacked along a new leading axis, and one
jit-compiled epoch trains every member (jax.vmap over the states and keys; the
training set, shared, is not mapped). Evaluation is mapped the same way.

A member therefore starts from the weights, dropout masks and shuffles it would
have had alone; what it computes is the same, up to floating-point reassociation
in the batched kernels (tests/test_fused.py states the tolerance).

JAX backend only; the planner (gridbench.gridsearch.fusion) refuses the others.
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gridbench import compile_cache
from gridbench.datasets import Dataset
from gridbench.workloads import program_key, saved_programs
from gridbench.workloads.keras_common import keras_facts, precision_policy, set_random_seed
from gridbench.workloads.keras_compiled import (
    as_sharding,
    compile_evaluation,
    device_of,
    eval_chunks,
    make_correct_count,
    make_train_epoch,
    make_train_step,
    model_and_optimizer,
    optimizer_for,
    saved_or_compiled,
    state_of,
    wait_until_placed,
)
from gridbench.workloads.programs import BUILD_LOCK, PROGRAMS, Program, program_tags

if TYPE_CHECKING:  # the clock is the trial's; a workload only calls it
    from gridbench.trial.timing import PhaseClock

ModelBuilder = Callable[[Mapping[str, Any]], keras.Model]


class FusedSession:
    """A group's members on one device: build (each member seeded), fit (one vmapped epoch), evaluate.

    `build_model(hyperparameters)` returns one member's uncompiled Keras model; it
    runs under the group's dtype policy. Every member must share batch_size, epochs
    and everything else that shapes the program (the planner groups them so).
    """

    def __init__(
        self,
        members: Sequence[Mapping[str, Any]],
        seeds: Sequence[int],
        data: Dataset,
        build_model: ModelBuilder,
        keep_programs: bool = True,
    ):
        if not members or len(members) != len(seeds):
            raise ValueError(f"a fused group needs one seed per member; got {len(members)} members, {len(seeds)} seeds")
        self.members = [dict(m) for m in members]
        self.seeds = [int(s) for s in seeds]
        self.data = data
        self.build_model = build_model
        self.keep_programs = keep_programs  # saved on disk for later workers (saved_programs): not a user's model
        first = self.members[0]
        self.batch_size = int(first["batch_size"])
        self.epochs = int(first["epochs"])
        for member in self.members[1:]:
            if int(member["batch_size"]) != self.batch_size or int(member["epochs"]) != self.epochs:
                raise ValueError("the members of a fused group must share batch_size and epochs")
        self.steps = len(data.x_train) // self.batch_size
        if self.steps == 0:
            raise ValueError(f"batch_size {self.batch_size} is larger than the {len(data.x_train)} training samples")
        self.train_samples = self.steps * self.batch_size  # per member
        self.state: tuple | None = None
        self.program: Program | None = None
        self.workload = ""  # the trial names it: part of the program's key

    @property
    def program_key(self) -> tuple:
        """What the group's executable depends on: the members' program, their number, the data's shapes, the device."""
        x, y = self.data.x_train, self.data.y_train
        return (
            "fused",
            self.workload,
            program_key(self.members[0]),
            self.size,
            x.shape,
            str(x.dtype),
            y.shape,
            self.data.num_classes,
            str(jax.local_devices()[0]),
        )

    @property
    def size(self) -> int:
        return len(self.members)

    def build(self) -> None:
        # One device: a group is one program on one device (data parallelism is refused by the planner).
        keras.distribution.set_distribution(None)
        states, models, optimizers = [], {}, []
        for hyperparameters, seed in zip(self.members, self.seeds):
            # As CompiledSession.build, member by member: the same seed gives the same initial weights. Members
            # that differ only in their learning rate, the optimizer's alone, share one model: on 2 cores a group
            # of 8 took 0.139-0.150 s with 2 models against 0.191-0.238 s with 8 (docs/results/around-training.md).
            model_key = (seed, tuple(sorted((k, repr(v)) for k, v in hyperparameters.items() if k != "learning_rate")))
            with BUILD_LOCK:
                if model_key not in models:
                    set_random_seed(seed)
                    with precision_policy(hyperparameters):
                        models[model_key] = self.build_model(hyperparameters)
                optimizers.append(optimizer_for(models[model_key], hyperparameters))
            states.append(state_of(models[model_key], optimizers[-1]))
        # The first member's model and optimizer trace the program; the others only lend their state.
        self.model, self.optimizer = next(iter(models.values())), optimizers[0]
        self.place = next(iter(states[0][0][0].devices()))
        stacked = jax.tree_util.tree_map(lambda *values: jnp.stack(values), *states)
        self.state = jax.device_put(stacked, self.place)
        self.x_train = jax.device_put(self.data.x_train, self.place)
        self.y_train = jax.device_put(self.data.y_train.astype(np.int32), self.place)
        # Each member's shuffle key, as CompiledSession derives it from its seed.
        keys = jnp.stack([jax.random.key_data(jax.random.key(s)) for s in self.seeds])
        self.keys = jax.device_put(keys, self.place)
        wait_until_placed(self.state, self.keys, self.x_train, self.y_train)

    def compile(self) -> dict[str, str]:
        """Takes the group's program from the worker's cache, compiling it if no group of its key has."""
        key, arguments = self.program_key, (self.state, self.keys, self.x_train, self.y_train)
        compiling = partial(
            _compile_fused, self.model, self.optimizer, arguments, self.steps, self.batch_size, self.place
        )
        lookup = PROGRAMS.get(
            key, lambda: saved_or_compiled(key, arguments, self.place, compiling, keep=self.keep_programs)
        )
        self.program = lookup.program
        return program_tags(lookup)

    def compile_detached(self) -> Program:
        """Compiles this group's program from shapes alone (nothing on the device): for compiling ahead."""
        with BUILD_LOCK:
            model, optimizer = model_and_optimizer(partial(self.build_model, self.members[0]), self.members[0])
        place = jax.local_devices()[0]
        sharding = as_sharding(place)

        def stacked(value):
            return jax.ShapeDtypeStruct((self.size, *value.shape), value.dtype, sharding=sharding)

        key_data = jax.random.key_data(jax.random.key(0))
        x, y = self.data.x_train, self.data.y_train
        arguments = (
            jax.tree_util.tree_map(stacked, state_of(model, optimizer)),
            stacked(key_data),
            jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
            jax.ShapeDtypeStruct(y.shape, np.int32, sharding=sharding),
        )
        compiling = partial(_compile_fused, model, optimizer, arguments, self.steps, self.batch_size, place)
        return saved_or_compiled(self.program_key, arguments, place, compiling, keep=self.keep_programs, ahead=True)

    def actual_device(self) -> str:
        return device_of(self.state, self.x_train)

    def sync(self) -> None:
        if self.state is not None:
            jax.block_until_ready(self.state)

    def fit(self, clock: PhaseClock) -> list[dict[str, float]]:
        """Trains every member for `epochs`; returns each member's last epoch's mean loss."""
        if self.program is None:  # not compiled in a phase of its own: compiling is the warm-up's part
            self.compile()
        losses = []
        for _ in range(self.epochs):
            clock.epoch_begin()
            self.state, self.keys, loss = self.program.train_epoch(self.state, self.keys, self.x_train, self.y_train)
            clock.epoch_end()
            losses.append(loss)
        from gridbench.workloads.keras_common import loss_metrics

        # Each member's own losses by epoch: its train_loss, and diverged_epoch if one was NaN or inf.
        return [loss_metrics(member) for member in np.asarray(losses, dtype=np.float64).T]

    def evaluate(self) -> list[dict[str, float]]:
        trainable, non_trainable, _ = self.state
        chunks = eval_chunks(self.data.x_test, self.data.y_test, self.place)
        correct = sum(np.asarray(self.program.correct(trainable, non_trainable, *chunk)) for chunk in chunks)
        return [{"test_accuracy": int(c) / len(self.data.x_test)} for c in np.atleast_1d(correct)]

    def facts(self) -> dict[str, str]:
        return {
            **keras_facts(self.model),
            "train_loop": "compiled",
            "steps_per_execution": str(self.steps),
        }


def _compile_fused(
    model: keras.Model,
    optimizer: keras.Optimizer,
    arguments: tuple,
    steps: int,
    batch_size: int,
    place,
    tag: str | None = None,
    ahead: bool = False,
) -> Program:
    """Traces and compiles the vmapped epoch and evaluation for `arguments`' shapes (a leading member axis); `tag`
    ends the executables' names (saved_programs.ready_or_compile)."""
    start, cache = time.perf_counter(), compile_cache.mark()
    epoch = make_train_epoch(
        make_train_step(model, optimizer, keras.losses.SparseCategoricalCrossentropy()), steps, batch_size
    )

    def fused_epoch(state, key_data, x_all, y_all):
        def one(member_state, member_key_data):
            member_state, key, loss = epoch(member_state, jax.random.wrap_key_data(member_key_data), x_all, y_all)
            return member_state, jax.random.key_data(key), loss

        return jax.vmap(one)(state, key_data)

    # One program per group's key; donating the stacked state lets XLA update every member's weights in place.
    train_epoch = jax.jit(saved_programs.tagged(fused_epoch, tag), donate_argnums=0).lower(*arguments).compile()
    correct = compile_evaluation(jax.vmap(make_correct_count(model), in_axes=(0, 0, None, None)), arguments, place, tag)
    return Program(train_epoch, correct, time.perf_counter() - start, ahead, cached=compile_cache.all_loaded(cache))
