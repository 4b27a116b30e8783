"""`python placed_at_build.py`: whether what a compiled loop's build places on the device is there when build returns,
for one configuration and a fused group of two, on mnist-shaped synthetic data (test_workloads).

JAX copies a host array to the device after device_put has returned, on a CPU too (0.068-0.086 s for mnist's
training set on 2 cores): unless build waits, the copy runs on into the trial's compile phase. Prints one line per
session: its kind and each placed array's readiness.
"""

import jax

from gridbench.datasets import DataSource
from gridbench.datasets.trial_data import load
from gridbench.workloads import WORKLOADS, keras_mlp


def ready(value) -> bool:
    """Whether every array of `value` is on its device (a typed PRNG key by its data)."""
    leaves = jax.tree_util.tree_leaves(value)
    return all(getattr(leaf, "is_ready", lambda: jax.random.key_data(leaf).is_ready())() for leaf in leaves)


if __name__ == "__main__":
    data = load(DataSource("mnist", synthetic=True), 0)
    hp = {hp.name: hp.default for hp in WORKLOADS["mlp"].hyperparameters}
    hp.update(epochs=2, train_loop="compiled", hidden_units=16, batch_size=128, optimizer="adam")
    sessions = {
        "compiled": keras_mlp.open_session(hp, data, seed=0),
        "fused": keras_mlp.open_fused_session([hp, dict(hp, learning_rate=0.003)], data, [0, 0]),
    }
    for kind, session in sessions.items():
        session.build()
        keys = session.keys if kind == "fused" else session.key
        placed = {"x_train": session.x_train, "y_train": session.y_train, "key": keys, "state": session.state}
        print(kind, *(f"{name}={ready(value)}" for name, value in placed.items()))
