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

JAX backend only; the planner (gridbench.search.fusion) refuses the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import keras
import numpy as np

from gridbench.datasets import Dataset
from gridbench.workloads.keras_common import keras_facts, make_optimizer, normalise_device, precision_policy
from gridbench.workloads.keras_compiled import (
    EVAL_BATCH,
    make_correct_count,
    make_train_epoch,
    make_train_step,
)

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
    ):
        if not members or len(members) != len(seeds):
            raise ValueError(f"a fused group needs one seed per member; got {len(members)} members, {len(seeds)} seeds")
        self.members = [dict(m) for m in members]
        self.seeds = [int(s) for s in seeds]
        self.data = data
        self.build_model = build_model
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

    @property
    def size(self) -> int:
        return len(self.members)

    def build(self) -> None:
        # One device: a group is one program on one device (data parallelism is refused by the planner).
        keras.distribution.set_distribution(None)
        states, model, optimizer = [], None, None
        for hyperparameters, seed in zip(self.members, self.seeds):
            # As CompiledSession.build, member by member: the same seed gives the same initial weights.
            keras.utils.set_random_seed(seed)
            with precision_policy(hyperparameters):
                member_model = self.build_model(hyperparameters)
            member_optimizer = make_optimizer(hyperparameters)
            if member_model.dtype_policy.name == "mixed_float16":
                member_optimizer = keras.optimizers.LossScaleOptimizer(member_optimizer)
            member_optimizer.build(member_model.trainable_variables)
            states.append(
                (
                    [v.value for v in member_model.trainable_variables],
                    [v.value for v in member_model.non_trainable_variables],
                    [v.value for v in member_optimizer.variables],
                )
            )
            # The first member's model and optimizer trace the program; the others only lend their state.
            model, optimizer = (model, optimizer) if model is not None else (member_model, member_optimizer)
        self.model, self.optimizer = model, optimizer
        device = next(iter(states[0][0][0].devices()))
        stacked = jax.tree_util.tree_map(lambda *values: jnp.stack(values), *states)
        self.state = jax.device_put(stacked, device)
        self.x_train = jax.device_put(self.data.x_train, device)
        self.y_train = jax.device_put(self.data.y_train.astype(np.int32), device)
        # Each member's shuffle key, as CompiledSession derives it from its seed.
        self.keys = jax.device_put(jnp.stack([jax.random.key_data(jax.random.key(s)) for s in self.seeds]), device)
        loss_fn = keras.losses.SparseCategoricalCrossentropy()
        epoch = make_train_epoch(make_train_step(model, optimizer, loss_fn), self.steps, self.batch_size)

        def fused_epoch(state, key_data, x_all, y_all):
            def one(member_state, member_key_data):
                member_state, key, loss = epoch(member_state, jax.random.wrap_key_data(member_key_data), x_all, y_all)
                return member_state, jax.random.key_data(key), loss

            return jax.vmap(one)(state, key_data)

        # One jit per group; donating the stacked state lets XLA update every member's weights in place.
        self._train_epoch = jax.jit(fused_epoch, donate_argnums=0)
        self._correct = jax.jit(jax.vmap(make_correct_count(model), in_axes=(0, 0, None, None)))

    def actual_device(self) -> str:
        weights, data = normalise_device(self.state[0][0]), normalise_device(self.x_train)
        if weights != data:
            raise RuntimeError(f"weights on {weights} but training data on {data}")
        return weights

    def sync(self) -> None:
        if self.state is not None:
            jax.block_until_ready(self.state)

    def fit(self, clock: PhaseClock) -> list[dict[str, float]]:
        """Trains every member for `epochs`; returns each member's last epoch's mean loss."""
        losses = []
        for _ in range(self.epochs):
            clock.epoch_begin()
            self.state, self.keys, loss = self._train_epoch(self.state, self.keys, self.x_train, self.y_train)
            clock.epoch_end()
            losses.append(loss)
        from gridbench.workloads.keras_common import loss_metrics

        # Each member's own losses by epoch: its train_loss, and diverged_epoch if one was NaN or inf.
        return [loss_metrics(member) for member in np.asarray(losses, dtype=np.float64).T]

    def evaluate(self) -> list[dict[str, float]]:
        trainable, non_trainable, _ = self.state
        x, y = self.data.x_test, self.data.y_test.astype(np.int32)
        # Full chunks only, as CompiledSession pads them: evaluation compiles once; label -1 matches nothing.
        padding = -len(x) % EVAL_BATCH
        x = np.concatenate([x, np.zeros((padding, *x.shape[1:]), x.dtype)])
        y = np.concatenate([y, np.full(padding, -1, np.int32)])
        correct = sum(
            np.asarray(self._correct(trainable, non_trainable, x[i : i + EVAL_BATCH], y[i : i + EVAL_BATCH]))
            for i in range(0, len(x), EVAL_BATCH)
        )
        return [{"test_accuracy": int(c) / len(self.data.x_test)} for c in np.atleast_1d(correct)]

    def facts(self) -> dict[str, str]:
        return {
            **keras_facts(self.model),
            "train_loop": "compiled",
            "steps_per_execution": str(self.steps),
        }
