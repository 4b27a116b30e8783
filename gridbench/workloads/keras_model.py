"""The model families (gridbench.workloads.keras_families) as workload entries.

Each family's `train` names one Entry here (trial.WorkloadEntry). A trial trains its
model with Keras `fit` (train_loop=fit) or gridbench's compiled loop (compiled,
JAX only), on the trial's share of the training set (train_size) under its dtype
policy (precision).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import keras
from keras import ops

from gridbench import compile_cache
from gridbench.datasets import Dataset
from gridbench.datasets.trial_data import take_train
from gridbench.tracking import schema
from gridbench.workloads import keras_common, keras_families
from gridbench.workloads.keras_common import (
    EpochCallback,
    keras_facts,
    normalise_device,
    precision_policy,
    set_random_seed,
    single_device,
)
from gridbench.workloads.keras_fit_programs import fit_program_key, take_model
from gridbench.workloads.programs import BUILD_LOCK

if TYPE_CHECKING:  # the clock is the trial's; a workload only calls it
    from gridbench.trial.timing import PhaseClock


class Entry:
    """A model family's entry: the common Keras set-up, and sessions that build its model."""

    # Its compiled programs saved on disk for later workers (gridbench.workloads.saved_programs), named by
    # gridbench's own source among the rest: a user's model (UserEntry), whose source is not, keeps none.
    keeps_programs = True

    def __init__(self, family: str):
        self.family = family
        self.build = keras_families.BUILDERS[family]

    def prepare(self, context) -> None:
        keras_common.prepare(context)

    def open_session(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int):
        data = take_train(data, int(hyperparameters.get("train_size", 0)), seed)

        def build_model() -> keras.Model:
            return self.build(hyperparameters, data.x_train.shape[1:], data.num_classes)

        if hyperparameters.get("train_loop") == "compiled":
            from gridbench.workloads.keras_compiled import CompiledSession

            return CompiledSession(
                hyperparameters, data, seed, build_model, workload=self.family, keep_programs=self.keeps_programs
            )
        return KerasFitSession(hyperparameters, data, seed, build_model, workload=self.family)

    def open_fused_session(self, members: Sequence[Mapping[str, Any]], data: Dataset, seeds: Sequence[int]):
        """A fused group of this family's configurations (gridbench.workloads.keras_fused), one seed per member."""
        from gridbench.workloads.keras_fused import FusedSession

        # The planner groups a subset (train_size) by repeat, so that every member trains on the same samples.
        sizes = {int(m.get("train_size", 0)) for m in members}
        if len(sizes) != 1 or (sizes != {0} and len(set(seeds)) != 1):
            raise ValueError("the members of a fused group must train on the same samples (train_size and seed)")
        data = take_train(data, sizes.pop(), seeds[0])

        def build_model(hyperparameters: Mapping[str, Any]) -> keras.Model:
            return self.build(hyperparameters, data.x_train.shape[1:], data.num_classes)

        return FusedSession(members, seeds, data, build_model, keep_programs=self.keeps_programs)


class KerasFitSession:
    """One trial's model on Keras `fit`: build and compile, fit (a clock reading per epoch), evaluate.

    A worker keeps the model of each program it has trained (gridbench.workloads.
    keras_fit_programs): a later trial of the same program trains that model, reset
    to its own initial state, and so reuses its traced `fit` step.
    """

    def __init__(self, hyperparameters: Mapping[str, Any], data: Dataset, seed: int, build_model, workload: str = ""):
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.seed = seed
        self.build_model = build_model
        self.workload = workload
        self.train_samples = len(data.x_train)
        self.model: keras.Model | None = None
        self.program_reused = False
        self._epochs = EpochCallback()
        self._cache = compile_cache.mark()  # fit compiles in this thread; facts() asks what the cache served since

    def build(self) -> None:
        with BUILD_LOCK:  # the seed, then the build that draws from it, with no compilation ahead between
            set_random_seed(self.seed)
            single_device()
            with precision_policy(self.hyperparameters):
                fresh = self.build_model()
        # compile() wraps the optimizer in a LossScaleOptimizer under mixed_float16.
        fresh.compile(
            optimizer=keras_common.make_optimizer(self.hyperparameters),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
        key = fit_program_key(self.workload, self.hyperparameters, self.data)
        first_batch = (self.data.x_train[:1], self.data.y_train[:1])
        self.model, self.program_reused = take_model(key, fresh, self.hyperparameters, first_batch)

    def actual_device(self) -> str:
        return normalise_device(self.model.weights[0].value)

    def sync(self) -> None:
        if self.model is not None and self.model.weights:
            ops.convert_to_numpy(self.model.weights[-1].value)

    def fit(self, clock: PhaseClock) -> dict[str, float]:
        self._epochs.clock = clock
        self.model.fit(
            self.data.x_train,
            self.data.y_train,
            epochs=int(self.hyperparameters["epochs"]),
            batch_size=int(self.hyperparameters["batch_size"]),
            callbacks=[self._epochs],
            verbose=0,
        )
        return self._epochs.loss_metrics()  # train_loss, and diverged_epoch if NaN or inf

    def evaluate(self) -> dict[str, float]:
        results = self.model.evaluate(self.data.x_test, self.data.y_test, batch_size=1024, verbose=0, return_dict=True)
        return {"test_accuracy": float(results["accuracy"])}

    def facts(self) -> dict[str, str]:
        return {
            **keras_facts(self.model),
            "train_loop": "fit",
            schema.PROGRAM_REUSED: "yes" if self.program_reused else "no",
            schema.PROGRAM_CACHED: "yes" if compile_cache.all_loaded(self._cache) else "no",
        }


CNN = Entry("cnn")
VGG = Entry("vgg")
RESNET = Entry("resnet")
SMALLCNN = Entry("smallcnn")
BILSTM = Entry("bilstm")
FASTTEXT = Entry("fasttext")
CHAR_LSTM = Entry("char_lstm")
