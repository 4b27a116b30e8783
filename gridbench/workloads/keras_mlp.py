"""The Keras MLP workload, as a scikit-learn estimator (SciKeras' KerasClassifier).

The estimator is what a user would pass to GridSearchCV; gridbench drives it in
phases (build, fit, evaluate) so that each can be timed on its own. With
train_loop=compiled the same model trains through gridbench.workloads.keras_compiled.

This module is the workload's entry (trial.WorkloadEntry): prepare, open_session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import keras
from keras import ops

from gridbench import compile_cache
from gridbench.datasets import Dataset
from gridbench.tracking import schema
from gridbench.workloads.keras_common import (  # noqa: F401  (prepare: this module is a workload entry)
    EpochCallback,
    keras_facts,
    normalise_device,
    precision_policy,
    prepare,
    set_random_seed,
    single_device,
)
from gridbench.workloads.keras_fit_programs import fit_program_key, take_model
from gridbench.workloads.keras_layers import TunableDropout
from gridbench.workloads.programs import BUILD_LOCK

if TYPE_CHECKING:  # the clock is the trial's; a workload only calls it
    from scikeras.wrappers import KerasClassifier

    from gridbench.trial.timing import PhaseClock


def build_mlp(
    hidden_units: int, hidden_layers: int, dropout: float, meta: dict[str, Any], compile_kwargs: dict | None = None
) -> keras.Model:
    """Dense+ReLU layers with dropout, then softmax; SciKeras supplies `meta` (input and class counts).

    SciKeras also passes `compile_kwargs` (its loss and optimizer): compiled here, at
    initialize() rather than in fit(), a trial's model can be kept for later trials
    (gridbench.workloads.keras_fit_programs). The compiled loop passes none.
    """
    layers: list[keras.layers.Layer] = [keras.Input(shape=(meta["n_features_in_"],))]
    for _ in range(hidden_layers):
        layers.append(keras.layers.Dense(hidden_units, activation="relu"))
        # Also at rate 0, so that every dropout value shares one program.
        layers.append(TunableDropout(dropout))
    # float32 under mixed precision too: a float16 softmax over-/underflows.
    layers.append(keras.layers.Dense(meta["n_classes_"], activation="softmax", dtype="float32"))
    model = keras.Sequential(layers)
    if compile_kwargs is not None:
        model.compile(**compile_kwargs)
    return model


def make_estimator(hyperparameters: Mapping[str, Any], seed: int, callbacks: list | None = None) -> KerasClassifier:
    """The MLP as a scikit-learn classifier, usable with GridSearchCV as it is."""
    # Imported here: SciKeras imports TensorFlow where it is installed (2.3 s on the
    # developer machine), which the compiled loop on JAX never needs.
    from scikeras.wrappers import KerasClassifier

    return KerasClassifier(
        model=build_mlp,
        model__hidden_units=hyperparameters["hidden_units"],
        model__hidden_layers=hyperparameters["hidden_layers"],
        model__dropout=hyperparameters["dropout"],
        loss="sparse_categorical_crossentropy",
        optimizer=hyperparameters["optimizer"],
        optimizer__learning_rate=hyperparameters["learning_rate"],
        epochs=hyperparameters["epochs"],
        batch_size=hyperparameters["batch_size"],
        callbacks=callbacks,
        random_state=seed,
        verbose=0,
        # Keep the model that initialize() built, so that building is timed apart from fitting.
        warm_start=True,
    )


def open_session(hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
    """A session for the trial's train_loop: Keras fit, or the compiled loop."""
    if hyperparameters.get("train_loop") == "compiled":
        from gridbench.workloads.keras_compiled import CompiledSession

        hp = hyperparameters
        meta = {"n_features_in_": data.x_train.shape[1], "n_classes_": data.num_classes}
        return CompiledSession(
            hp,
            data,
            seed,
            lambda: build_mlp(hp["hidden_units"], hp["hidden_layers"], hp["dropout"], meta),
            workload="mlp",
        )
    return KerasMLPSession(hyperparameters, data, seed)


def open_fused_session(members: Sequence[Mapping[str, Any]], data: Dataset, seeds: Sequence[int]):
    """A fused group of MLP configurations (gridbench.workloads.keras_fused), one seed per member."""
    from gridbench.workloads.keras_fused import FusedSession

    meta = {"n_features_in_": data.x_train.shape[1], "n_classes_": data.num_classes}
    return FusedSession(
        members,
        seeds,
        data,
        lambda hp: build_mlp(hp["hidden_units"], hp["hidden_layers"], hp["dropout"], meta),
    )


class KerasMLPSession:
    """One trial's model: build, fit (one clock reading per epoch), evaluate.

    Its Keras model may be one the worker kept from an earlier trial of the same
    program, reset to this trial's initial state (gridbench.workloads.keras_fit_programs).
    """

    def __init__(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.seed = seed
        self.train_samples = len(data.x_train)
        self.estimator: KerasClassifier | None = None
        self.program_reused = False
        self._epochs = EpochCallback()
        self._cache = compile_cache.mark()  # fit compiles in this thread; facts() asks what the cache served since

    def build(self) -> None:
        with BUILD_LOCK:  # the seed, then the build that draws from it, with no compilation ahead between
            set_random_seed(self.seed)
            single_device()
            self.estimator = make_estimator(self.hyperparameters, self.seed, callbacks=[self._epochs])
            with precision_policy(self.hyperparameters):
                self.estimator.initialize(self.data.x_train, self.data.y_train)
        # The estimator keeps its own epochs, learning rate, seed and callbacks; its model
        # may be swapped for a kept one of the same program (SciKeras fits `model_` as it is).
        key = fit_program_key("mlp", self.hyperparameters, self.data)
        x, y = self.data.x_train[:1], self.data.y_train[:1]
        first_batch = (self.estimator.feature_encoder_.transform(x), self.estimator.target_encoder_.transform(y))
        self.estimator.model_, self.program_reused = take_model(
            key, self.estimator.model_, self.hyperparameters, first_batch
        )

    @property
    def model(self) -> keras.Model:
        return self.estimator.model_

    def actual_device(self) -> str:
        """Where the framework placed the model's weights, as "cpu:0" or "gpu:0"."""
        return normalise_device(self.model.weights[0].value)

    def sync(self) -> None:
        # Reading a weight back waits for every queued step that updates it, on any
        # backend (TensorFlow and PyTorch streams, JAX's asynchronous dispatch).
        if self.estimator is not None and self.model.weights:
            ops.convert_to_numpy(self.model.weights[-1].value)

    def fit(self, clock: PhaseClock) -> dict[str, float]:
        self._epochs.clock = clock
        self.estimator.fit(self.data.x_train, self.data.y_train)
        return self._epochs.loss_metrics()  # train_loss, and diverged_epoch if NaN or inf

    def evaluate(self) -> dict[str, float]:
        return {"test_accuracy": float(self.estimator.score(self.data.x_test, self.data.y_test))}

    def facts(self) -> dict[str, str]:
        return {
            **keras_facts(self.model),
            "train_loop": "fit",
            schema.PROGRAM_REUSED: "yes" if self.program_reused else "no",
            schema.PROGRAM_CACHED: "yes" if compile_cache.all_loaded(self._cache) else "no",
        }
