"""`python fused_and_alone.py MODELS`: for each of MODELS (comma-separated: mlp, cnn), four configurations trained
fused (one program for all four), then each alone, in this process on JAX; prints one JSON line of a report per
model: each member's loss and accuracy both ways, the epochs, device, loop and samples (test_fused)."""

import json
import sys
from functools import partial

import jax
import keras
import numpy as np

from gridbench import datasets
from gridbench.datasets import trial_data
from gridbench.trial.timing import PhaseClock
from gridbench.workloads import get_workload, keras_compiled, keras_mlp, keras_model

SMALL = {"mlp": {"hidden_units": 32, "hidden_layers": 1}, "cnn": {"filters": 4, "dense_units": 16}}


def report(model: str) -> dict:
    workload = get_workload(model, "test")
    entry = keras_mlp if model == "mlp" else keras_model.CNN
    data = trial_data.load(datasets.DataSource("digits"), seed=0, flat=workload.flat_inputs)
    base = {hp.name: hp.default for hp in workload.hyperparameters}
    base.update(epochs=3, batch_size=32, train_loop="compiled", optimizer="adam")
    base.update(SMALL[model])
    members = [dict(base, dropout=d, learning_rate=lr) for d in (0.0, 0.3) for lr in (0.001, 0.01)]
    # Repeats 0 and 1 of a seed-0 spec; members 0 and 1 (and 2 and 3) differ only in their learning rate: the group
    # builds one model for each pair, and each member's initial state must be the one it would build alone.
    seeds = [0, 0, 1, 1]
    fused = entry.open_fused_session(members, data, seeds)
    fused.build()
    initial = [same_initial_state(fused, i) for i in range(len(members))]
    clock = PhaseClock(sync=fused.sync)
    rows = [{"fused": [f["train_loss"], e["test_accuracy"]]} for f, e in zip(fused.fit(clock), fused.evaluate())]
    for row, member, seed in zip(rows, members, seeds):
        alone = entry.open_session(member, data, seed=seed)
        alone.build()
        row["alone"] = [alone.fit(PhaseClock(sync=alone.sync))["train_loss"], alone.evaluate()["test_accuracy"]]
    return {
        "rows": rows,
        "same_initial_state": initial,
        "epochs": len(clock.epochs),
        "device": fused.actual_device(),
        "loop": fused.facts()["train_loop"],
        "samples": fused.train_samples,
    }


def same_initial_state(fused, index: int) -> bool:
    """Member `index`'s slice of the group's state equals the state of its own model and optimizer, built alone."""
    member, seed = fused.members[index], fused.seeds[index]
    keras.utils.set_random_seed(seed)
    alone = keras_compiled.state_of(*keras_compiled.model_and_optimizer(partial(fused.build_model, member), member))
    group = jax.tree_util.tree_map(lambda stacked: stacked[index], fused.state)
    return all(np.array_equal(a, b) for a, b in zip(jax.tree_util.tree_leaves(alone), jax.tree_util.tree_leaves(group)))


if __name__ == "__main__":
    print(json.dumps({model: report(model) for model in sys.argv[1].split(",")}))
