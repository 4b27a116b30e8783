"""The Keras MLP workload, as a scikit-learn estimator (SciKeras' KerasClassifier).

The estimator is what a user would pass to GridSearchCV; gridbench drives it in
phases (build, fit, evaluate) so that each can be timed on its own. With
train_loop=compiled the same model trains through gridbench.workloads.keras_compiled.

This module is the workload's entry (trial.WorkloadEntry): prepare, open_session.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import keras
from keras import ops
from scikeras.wrappers import KerasClassifier

from gridbench import placement
from gridbench.datasets import Dataset
from gridbench.timing import PhaseClock


def build_mlp(hidden_units: int, hidden_layers: int, dropout: float, meta: dict[str, Any]) -> keras.Model:
    """Dense+ReLU layers with dropout, then softmax; SciKeras supplies `meta` (input and class counts)."""
    layers: list[keras.layers.Layer] = [keras.Input(shape=(meta["n_features_in_"],))]
    for _ in range(hidden_layers):
        layers.append(keras.layers.Dense(hidden_units, activation="relu"))
        if dropout:
            layers.append(keras.layers.Dropout(dropout))
    layers.append(keras.layers.Dense(meta["n_classes_"], activation="softmax"))
    return keras.Sequential(layers)


def make_estimator(hyperparameters: Mapping[str, Any], seed: int, callbacks: list | None = None) -> KerasClassifier:
    """The MLP as a scikit-learn classifier, usable with GridSearchCV as it is."""
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


class _EpochCallback(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.clock: PhaseClock | None = None  # set by fit(); SciKeras fixes callbacks at initialize()
        self.last_loss = float("nan")

    def on_epoch_begin(self, epoch, logs=None):
        self.clock.epoch_begin()

    def on_epoch_end(self, epoch, logs=None):
        self.clock.epoch_end()
        self.last_loss = float((logs or {}).get("loss", float("nan")))


def prepare(context) -> None:
    """Checks the backend this worker imported, limits it to the trial's CPUs and GPU memory share."""
    prepare_keras(context.cpus)
    if context.backend == "jax" and context.compile_cache_dir:
        import jax

        # Trials that differ only in values held as state (learning rate, seed) compile
        # to the same program: compile it once per search. Warm-up epochs still show
        # the compiling trial's cost, and the cache's own (loading a program).
        jax.config.update("jax_compilation_cache_dir", context.compile_cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    if context.device == "gpu" and context.backend == "torch":
        import torch

        # PyTorch allocates on demand; cap it so that one packed trial cannot starve the others.
        torch.cuda.set_per_process_memory_fraction(placement.memory_fraction(context.gpus_per_trial), 0)


def open_session(hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
    """A session for the trial's train_loop: Keras fit, or the compiled loop."""
    if hyperparameters.get("train_loop") == "compiled":
        from gridbench.workloads.keras_compiled import CompiledMLPSession

        return CompiledMLPSession(hyperparameters, data, seed)
    return KerasMLPSession(hyperparameters, data, seed)


def prepare_keras(cpus: int) -> None:
    """Checks the backend this worker imported and limits it to `cpus` threads."""
    wanted = os.environ.get("KERAS_BACKEND", "tensorflow")
    if keras.backend.backend() != wanted:
        raise RuntimeError(f"this worker already runs Keras on {keras.backend.backend()}; cannot switch to {wanted}")
    if wanted == "tensorflow":
        import tensorflow as tf

        try:
            tf.config.threading.set_intra_op_parallelism_threads(cpus)
            tf.config.threading.set_inter_op_parallelism_threads(cpus)
        except RuntimeError:
            pass  # initialised by an earlier trial in this worker, with the same CPUs; keras_facts() tells
    elif wanted == "torch":
        import torch

        torch.set_num_threads(cpus)


def keras_facts() -> dict[str, str]:
    """The backend and the thread counts it actually runs with, as tags."""
    backend = keras.backend.backend()
    facts = {"backend": backend, "version.keras": keras.__version__}
    if backend == "tensorflow":
        import tensorflow as tf

        facts["threads.tf_intra_op"] = str(tf.config.threading.get_intra_op_parallelism_threads())
        facts["threads.tf_inter_op"] = str(tf.config.threading.get_inter_op_parallelism_threads())
    elif backend == "torch":
        import torch

        facts["threads.torch"] = str(torch.get_num_threads())
        facts["version.torch_cuda"] = str(torch.version.cuda)
    elif backend == "jax":
        import jax

        facts["jax.platform"] = jax.default_backend()
    return facts


class KerasMLPSession:
    """One trial's model: build, fit (one clock reading per epoch), evaluate."""

    def __init__(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.seed = seed
        self.train_samples = len(data.x_train)
        self.estimator: KerasClassifier | None = None
        self._epochs = _EpochCallback()

    def build(self) -> None:
        keras.utils.set_random_seed(self.seed)
        self.estimator = make_estimator(self.hyperparameters, self.seed, callbacks=[self._epochs])
        self.estimator.initialize(self.data.x_train, self.data.y_train)

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
        return {"train_loss": self._epochs.last_loss}

    def evaluate(self) -> dict[str, float]:
        return {"test_accuracy": float(self.estimator.score(self.data.x_test, self.data.y_test))}

    def facts(self) -> dict[str, str]:
        return {**keras_facts(), "train_loop": "fit"}


def normalise_device(tensor: Any) -> str:
    """Names a TensorFlow, JAX or PyTorch tensor's device as "cpu:0" or "gpu:1"."""
    if hasattr(tensor, "devices"):  # JAX
        device = next(iter(tensor.devices()))
        kind = {"cuda": "gpu", "rocm": "gpu"}.get(device.platform, device.platform)
        return f"{kind}:{device.id}"
    raw = str(tensor.device)
    if raw.startswith("/job:") or "device:" in raw:  # TensorFlow: /job:localhost/.../device:CPU:0
        kind, index = raw.rsplit("device:", 1)[1].split(":")
        return f"{kind.lower()}:{index}"
    kind, _, index = raw.partition(":")  # PyTorch: cpu, cuda:0
    return f"{'gpu' if kind == 'cuda' else kind}:{index or 0}"
