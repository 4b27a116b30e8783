"""What every Keras workload shares: process set-up, optimizers, precision, device facts.

Imported inside a trial only (it imports Keras and so the backend).
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from typing import TYPE_CHECKING, Any, Mapping

import keras

from gridbench import compile_cache
from gridbench.tracking import schema
from gridbench.workloads.hidden_imports import hidden
from gridbench.workloads.keras_layers import parameter_count

if TYPE_CHECKING:  # the clock is the trial's; a workload only calls it
    from gridbench.trial.timing import PhaseClock


OPTIMIZERS = {"adam": keras.optimizers.Adam, "rmsprop": keras.optimizers.RMSprop, "sgd": keras.optimizers.SGD}


def set_random_seed(seed: int) -> None:
    """keras.utils.set_random_seed, without importing TensorFlow for a trial on another backend.

    Keras seeds TensorFlow too wherever it is installed (for tf.data pipelines), and imports it to find out; as
    the README installs gridbench, tensorflow-cpu is there. On 2 cores, in a JAX worker's first trial on the
    compiled loop, the setup took 1.613-1.794 s with that import and 0.201-0.238 s without
    (docs/results/around-training.md). No trial on JAX or torch runs a TensorFlow op; where TensorFlow is
    already imported (scikeras' fit wrapper, a user's model), Keras seeds it as ever.
    """
    if keras.backend.backend() == "tensorflow" or sys.modules.get("tensorflow") is not None:
        keras.utils.set_random_seed(seed)
        return
    try:
        with hidden("tensorflow"):  # Keras' import of it fails: it seeds the rest
            keras.utils.set_random_seed(seed)
    finally:
        _look_for_tensorflow_again()


def _look_for_tensorflow_again() -> None:
    """Keras remembers the failed import: its next check (a preprocessing layer that needs TensorFlow) imports it."""
    from keras.src.utils import module_utils  # Keras' own: no public way to ask it to look again

    lazy = getattr(module_utils, "tensorflow", None)
    if lazy is not None and getattr(lazy, "module", None) is None and getattr(lazy, "_available", None) is False:
        lazy._available = None


def data_parallel() -> keras.distribution.DataParallel | None:
    """Keras' data parallelism over every device this trial sees, where it sees more than one.

    A trial that asked Ray for several whole GPUs sees exactly those (trial.configure_
    process). Under Keras' DataParallel the model's variables are replicated on each
    device and every batch is split across them; XLA all-reduces the gradients.
    Set for the whole trial: Keras' fit reads it to shard its input batches.
    """
    if keras.backend.backend() != "jax":
        return None
    devices = keras.distribution.list_devices()
    distribution = keras.distribution.DataParallel(devices=devices) if len(devices) > 1 else None
    keras.distribution.set_distribution(distribution)
    return distribution


def single_device() -> None:
    """Keras fit trains on one device: no DataParallel left by an earlier trial in this worker."""
    if keras.backend.backend() == "jax":
        keras.distribution.set_distribution(None)


def check_divisible_batch(batch_size: int, distribution) -> None:
    devices = distribution.device_mesh.devices.size if distribution else 1
    if batch_size % devices:
        raise ValueError(f"batch_size {batch_size} does not split evenly over {devices} data-parallel devices")


def make_optimizer(hyperparameters: Mapping[str, Any]) -> keras.Optimizer:
    return OPTIMIZERS[hyperparameters["optimizer"]](learning_rate=hyperparameters["learning_rate"])


@contextlib.contextmanager
def precision_policy(hyperparameters: Mapping[str, Any]):
    """Builds layers under the trial's dtype policy, then restores the worker's (workers are reused)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(hyperparameters.get("precision", "float32"))
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def loss_metrics(epoch_losses) -> dict[str, float]:
    """The last epoch's training loss and, for a trial that diverged, the first epoch (from 1) with a NaN or inf loss.

    Read once training has ended: a loss still on the device is not waited for inside the timed epochs.
    """
    losses = [float(loss) for loss in epoch_losses]
    metrics = {schema.TRAIN_LOSS: losses[-1] if losses else float("nan")}
    diverged = next((epoch for epoch, loss in enumerate(losses, 1) if not math.isfinite(loss)), None)
    if diverged is not None:
        metrics[schema.DIVERGED_EPOCH] = float(diverged)
    return metrics


class EpochCallback(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.clock: PhaseClock | None = None  # set by fit(); SciKeras fixes callbacks at initialize()
        self.losses: list[float] = []  # each epoch's mean training loss, as fit reports it

    def on_train_begin(self, logs=None):
        self.losses = []

    def on_epoch_begin(self, epoch, logs=None):
        self.clock.epoch_begin()

    def on_epoch_end(self, epoch, logs=None):
        self.clock.epoch_end()
        self.losses.append(float((logs or {}).get("loss", float("nan"))))

    @property
    def last_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")

    def loss_metrics(self) -> dict[str, float]:
        return loss_metrics(self.losses)


def prepare(context) -> None:
    """Checks the backend this worker imported, limits it to the trial's CPUs and GPU memory share."""
    prepare_keras(context.cpus)
    if context.backend == "jax" and context.compile_cache_dir:
        # Trials that differ only in values held as state (learning rate, seed) compile
        # to the same program: compile it once per search (or load it from an earlier
        # search's). Warm-up epochs still show the compiling trial's cost, and the
        # cache's own (loading a program); program.cached says which it was.
        compile_cache.use(context.compile_cache_dir)
        from gridbench.workloads.programs import PROGRAMS

        PROGRAMS.lock_dir = context.compile_cache_dir  # one compilation per program across the search's workers
    elif context.backend == "jax":
        compile_cache.unused()  # --compile-cache off: no program read or written beside JAX's (saved_programs)
    if context.device == "gpu" and context.backend == "torch":
        import torch

        # PyTorch allocates on demand; cap it so that one packed trial cannot starve the others.
        torch.cuda.set_per_process_memory_fraction(context.memory_fraction, 0)


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


def keras_facts(model: keras.Model) -> dict[str, str]:
    """The backend, the thread counts it actually runs with and the model's dtype policy, as tags."""
    backend = keras.backend.backend()
    facts = {
        "backend": backend,
        "version.keras": keras.__version__,
        "precision": model.dtype_policy.name,
        "model.params": str(parameter_count(model)),
        "model.weight_layers": str(weight_layers(model)),
    }
    distribution = keras.distribution.distribution()
    facts["data_parallel.devices"] = str(distribution.device_mesh.devices.size if distribution else 1)
    if uses_lstm(model):
        facts["lstm.cudnn"] = "yes" if cudnn_lstm_available() else "no"
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


def normalise_device(tensor: Any) -> str:
    """Names a TensorFlow, JAX or PyTorch tensor's device as "cpu:0" or "gpu:1"."""
    if hasattr(tensor, "devices"):  # JAX; a replicated array (data parallelism) names its first device
        device = min(tensor.devices(), key=lambda d: d.id)
        kind = {"cuda": "gpu", "rocm": "gpu"}.get(device.platform, device.platform)
        return f"{kind}:{device.id}"
    raw = str(tensor.device)
    if raw.startswith("/job:") or "device:" in raw:  # TensorFlow: /job:localhost/.../device:CPU:0
        kind, index = raw.rsplit("device:", 1)[1].split(":")
        return f"{kind.lower()}:{index}"
    kind, _, index = raw.partition(":")  # PyTorch: cpu, cuda:0
    return f"{'gpu' if kind == 'cuda' else kind}:{index or 0}"


def weight_layers(model: keras.Model) -> int:
    """Convolutions and dense layers: what a network's "depth" counts."""
    kinds = (keras.layers.Conv2D, keras.layers.Dense)
    return sum(isinstance(layer, kinds) for layer in _flat_layers(model))


def _flat_layers(model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield from _flat_layers(layer)
        else:
            yield layer


def uses_lstm(model: keras.Model) -> bool:
    return any(isinstance(layer, (keras.layers.LSTM, keras.layers.Bidirectional)) for layer in _flat_layers(model))


def cudnn_lstm_available() -> bool:
    """Whether Keras runs an LSTM of cuDNN's conditions as a cuDNN kernel on this process's device.

    use_cudnn=True makes Keras raise instead of silently falling back; the models'
    LSTMs ("auto") meet the same conditions, so they take the same path.
    """
    probe = keras.layers.LSTM(2, use_cudnn=True)
    try:
        keras.ops.convert_to_numpy(probe(keras.ops.zeros((1, 3, 2))))
    except (ValueError, NotImplementedError):
        return False
    return True
