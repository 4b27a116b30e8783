"""The Keras MLP workload: device names read back from each framework, and the estimator under scikit-learn."""

from __future__ import annotations

import types

import pytest


class _JaxDevice:
    def __init__(self, platform, id):
        self.platform, self.id = platform, id


class _JaxArray:
    def __init__(self, platform, id):
        self._device = _JaxDevice(platform, id)

    def devices(self):
        return {self._device}


@pytest.mark.parametrize(
    "tensor, expected",
    [
        (types.SimpleNamespace(device="/job:localhost/replica:0/task:0/device:CPU:0"), "cpu:0"),
        (types.SimpleNamespace(device="/job:localhost/replica:0/task:0/device:GPU:1"), "gpu:1"),
        (_JaxArray("cpu", 0), "cpu:0"),
        (_JaxArray("cuda", 2), "gpu:2"),
        (types.SimpleNamespace(device="cuda:3"), "gpu:3"),
        (types.SimpleNamespace(device="cpu"), "cpu:0"),
    ],
)
def test_device_names_from_tensorflow_jax_and_torch(tensor, expected):
    keras_mlp = pytest.importorskip("gridbench.workloads.keras_mlp")
    assert keras_mlp.normalise_device(tensor) == expected


@pytest.mark.slow
def test_the_estimator_runs_under_gridsearchcv():
    """The estimator a trial trains is the one a user would hand to scikit-learn."""
    from sklearn.model_selection import GridSearchCV

    from gridbench import datasets
    from gridbench.spec import load_spec
    from gridbench.workloads.keras_mlp import make_estimator

    spec = load_spec("digits")
    hyperparameters = {**spec.params, "hidden_units": 16, "learning_rate": 0.01, "epochs": 2}
    data = datasets.load(datasets.locate("digits"), seed=0)
    search = GridSearchCV(make_estimator(hyperparameters, seed=0), {"model__hidden_units": [8, 16]}, cv=2)
    search.fit(data.x_train, data.y_train)
    assert search.best_params_["model__hidden_units"] in (8, 16)
    assert 0.3 < search.score(data.x_test, data.y_test) <= 1.0
