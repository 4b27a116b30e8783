"""The workloads a trial can train, described without importing any ML framework.

Each workload names its hyperparameters (with types, defaults and valid ranges) so
that specs and command-line overrides are checked before anything starts, and names
the function that trains it, imported only inside a trial.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from gridbench.errors import UserError

Value = int | float | str


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    kind: type  # int, float or str
    default: Value
    rule: str = ""  # what a valid value is, for messages: "> 0"
    valid: Callable[[Any], bool] = field(default=lambda value: True, repr=False)
    choices: tuple[str, ...] = ()

    def coerce(self, value: Any, where: str) -> Value:
        """Returns `value` as this hyperparameter's type, or raises a UserError naming `where`."""
        if isinstance(value, str) and self.kind is not str:
            try:
                value = self.kind(value)
            except ValueError:
                raise UserError(f"{where}: {self.name} must be {_kind_name(self.kind)}, got {value!r}") from None
        if isinstance(value, bool) or not _is_kind(value, self.kind):
            raise UserError(f"{where}: {self.name} must be {_kind_name(self.kind)}, got {value!r}")
        value = self.kind(value)
        if self.kind is float and not math.isfinite(value):
            raise UserError(f"{where}: {self.name} must be a finite number, got {value!r}")
        if self.choices and value not in self.choices:
            raise UserError(f"{where}: {self.name} must be one of {', '.join(self.choices)}; got {value!r}")
        if not self.valid(value):
            raise UserError(f"{where}: {self.name} must be {self.rule}, got {value!r}")
        return value


def _is_kind(value: Any, kind: type) -> bool:
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _kind_name(kind: type) -> str:
    return {int: "an integer", float: "a number", str: "a string"}[kind]


@dataclass(frozen=True)
class Workload:
    name: str
    datasets: tuple[str, ...]
    hyperparameters: tuple[Hyperparameter, ...]
    train: str  # "module" or "module:attribute" (see trial.WorkloadEntry), imported inside a trial only
    # Keras workloads run on a Keras backend; others name what they compute with.
    framework: str = "keras"
    # An axis whose values one trial trains together, sharing work (see trial.run_group_trial).
    inner_axis: str | None = None
    # The metric that says how long training took, for comparisons.
    train_metric: str = "steady_epoch_s"
    # Images as one row each (MLP, kernel methods); False: in their natural shape (CNNs).
    flat_inputs: bool = True
    description: str = ""  # what the model is, for `gridbench list`
    # A user's model (gridbench.workloads.user_model): its builder function, or ("module:function", folder);
    # `train` then names the entry class made for it.
    model_builder: Any = None

    def hyperparameter(self, name: str, where: str) -> Hyperparameter:
        for hp in self.hyperparameters:
            if hp.name == name:
                return hp
        known = ", ".join(hp.name for hp in self.hyperparameters)
        raise UserError(f"{where}: unknown hyperparameter {name!r} for model {self.name!r}; known: {known}")

    def load_train(self) -> Any:
        import importlib

        module, _, attribute = self.train.partition(":")
        loaded = importlib.import_module(module)
        loaded = getattr(loaded, attribute) if attribute else loaded
        return loaded(self.model_builder) if self.model_builder is not None else loaded

    def for_backend(
        self, params: dict[str, Value], grid: dict[str, tuple[Value, ...]], backend: str, device: str, where: str
    ):
        """Resolves `train_loop = "auto"` for `backend` on `device` and refuses loops the backend lacks."""
        if not any(hp.name == TRAIN_LOOP for hp in self.hyperparameters):
            return params, grid
        params, grid = dict(params), dict(grid)
        if TRAIN_LOOP in params:
            params[TRAIN_LOOP] = resolve_train_loop(str(params[TRAIN_LOOP]), backend, device, where)
        if TRAIN_LOOP in grid:
            loops = tuple(resolve_train_loop(str(v), backend, device, where) for v in grid[TRAIN_LOOP])
            if len(set(loops)) != len(loops):
                raise UserError(f"{where}: grid axis {TRAIN_LOOP!r} names the same loop twice on {backend}: {loops}")
            grid[TRAIN_LOOP] = loops
        return params, grid


# Hyperparameters a trained program takes as state or arguments, not as constants:
# trials that differ only in these (and in seed and repeat) share one traced and
# compiled program (gridbench.workloads.programs), and can be fused into one (jax.vmap).
RUNTIME_HYPERPARAMETERS = frozenset({"learning_rate", "dropout"})
# Not part of what a program computes: how long it trains, and on how much of the data.
UNTRACED_HYPERPARAMETERS = frozenset({"epochs"})


@functools.cache  # once per process: every program's name (saved programs, ready files) reads it
def source_digest() -> str:
    """gridbench.workloads' source: the loops, models, layers and optimizers a program is traced from."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def program_key(hyperparameters: dict[str, Value]) -> tuple[tuple[str, Value], ...]:
    """What decides a trial's traced program: architecture, batch size, precision, loop, optimizer.

    Two configurations with the same key share one program; the key leaves out the
    runtime hyperparameters (learning rate, dropout rate) and the epoch count.
    """
    left_out = RUNTIME_HYPERPARAMETERS | UNTRACED_HYPERPARAMETERS
    return tuple(sorted((k, v) for k, v in hyperparameters.items() if k not in left_out))


TRAIN_LOOP = "train_loop"
# "fit": Keras Model.fit, batches fed from host memory. "compiled":
# the data on the device and each epoch one jit-compiled lax.scan over Keras'
# stateless API (JAX only), which shows what the hardware can do.
TRAIN_LOOPS = ("auto", "fit", "compiled")
COMPILED_BACKENDS = ("jax",)


def resolve_train_loop(loop: str, backend: str, device: str, where: str) -> str:
    """ "auto" is the compiled loop on a GPU where the backend has one, else Keras fit.

    On CPU, XLA ran convolutions inside the compiled loop's scan 5-10x slower than
    Keras fit did (docs/results/families-cpu-2core.md); for MLPs the two were even.
    """
    if loop == "auto":
        return "compiled" if backend in COMPILED_BACKENDS and device == "gpu" else "fit"
    if loop == "compiled" and backend not in COMPILED_BACKENDS:
        raise UserError(
            f"{where}: train_loop=compiled needs --backend {' or '.join(COMPILED_BACKENDS)} "
            f"(Keras' stateless API under jax.jit); on {backend} use train_loop=fit"
        )
    return loop


def _positive(value: Any) -> bool:
    return value > 0


# Bounds that no sensible search exceeds: a typo (epochs=10**12, learning_rate=1e308) is refused, not run.
MAX_EPOCHS = 10_000
MAX_BATCH_SIZE = 2**20
MAX_LEARNING_RATE = 10.0


def keras_hyperparameters(
    epochs: int = 5, batch_size: int = 128, learning_rate: float = 0.001, optimizer: str = "rmsprop"
):
    """Hyperparameters every Keras workload has, with the family's defaults."""
    return (
        # Two epochs at least: the first is warm-up (tracing, compilation), the rest are timed.
        Hyperparameter(
            "epochs",
            int,
            epochs,
            f"in [2, {MAX_EPOCHS}] (epoch 1 is warm-up; later epochs are timed)",
            lambda v: 2 <= v <= MAX_EPOCHS,
        ),
        Hyperparameter("batch_size", int, batch_size, f"in [1, {MAX_BATCH_SIZE}]", lambda v: 0 < v <= MAX_BATCH_SIZE),
        Hyperparameter(
            "learning_rate",
            float,
            learning_rate,
            f"> 0 and <= {MAX_LEARNING_RATE:g}",
            lambda v: 0 < v <= MAX_LEARNING_RATE,
        ),
        Hyperparameter("optimizer", str, optimizer, choices=("adam", "rmsprop", "sgd")),
        Hyperparameter(TRAIN_LOOP, str, "auto", choices=TRAIN_LOOPS),
        # Keras dtype policies; mixed_float16 adds loss scaling, as Keras' compile does.
        Hyperparameter("precision", str, "float32", choices=PRECISIONS),
    )


PRECISIONS = ("float32", "mixed_float16", "mixed_bfloat16")
# The training set's first N samples of a seeded shuffle (0: all); the test set stays whole.
TRAIN_SIZE = Hyperparameter("train_size", int, 0, ">= 0 (0: the whole training set)", lambda v: v >= 0)


def dropout_hyperparameter(default: float) -> Hyperparameter:
    return Hyperparameter("dropout", float, default, "in [0, 1)", lambda v: 0 <= v < 1)


def _resnet_depth(value: Any) -> bool:
    return value >= 8 and (value - 2) % 6 == 0


# Keras multilayer perceptron: Dense+ReLU layers with dropout, softmax output.
MLP = Workload(
    name="mlp",
    datasets=("digits", "mnist"),
    hyperparameters=(
        *keras_hyperparameters(),
        Hyperparameter("hidden_units", int, 512, "> 0", _positive),
        Hyperparameter("hidden_layers", int, 2, "> 0", _positive),
        dropout_hyperparameter(0.2),
    ),
    train="gridbench.workloads.keras_mlp",
    description="Dense+ReLU layers with dropout (Keras' mnist_mlp example)",
)


def _family(name: str, datasets: tuple[str, ...], description: str, common: dict, *specific: Hyperparameter):
    return Workload(
        name=name,
        datasets=datasets,
        hyperparameters=(*keras_hyperparameters(**common), TRAIN_SIZE, *specific),
        train=f"gridbench.workloads.keras_model:{name.upper()}",
        flat_inputs=False,
        description=description,
    )


_VOCAB = Hyperparameter("vocab_size", int, 20000, ">= 4 (indices 0-2 are padding, start, unknown)", lambda v: v >= 4)

# The seeds' benchmark models (gridbench.workloads.keras_families), with the Keras examples' defaults.
FAMILIES = (
    _family(
        "cnn",
        ("mnist", "digits"),
        "two convolutions, pooling, dense (Keras' mnist_cnn example)",
        {"optimizer": "adam"},
        Hyperparameter("filters", int, 32, "> 0 (the second convolution has twice as many)", _positive),
        Hyperparameter("dense_units", int, 128, "> 0", _positive),
        dropout_hyperparameter(0.25),
    ),
    _family(
        "vgg",
        ("cifar10",),
        "VGG-like: two blocks of two convolutions (Keras' cifar10_cnn example)",
        {"learning_rate": 0.0001, "batch_size": 32},
        Hyperparameter("filters", int, 32, "> 0 (the second block has twice as many)", _positive),
        Hyperparameter("dense_units", int, 512, "> 0", _positive),
        dropout_hyperparameter(0.25),
    ),
    _family(
        "resnet",
        ("cifar10",),
        "ResNet v1 for CIFAR-10, depth 6n+2 (Keras' cifar10_resnet example)",
        {"optimizer": "adam", "batch_size": 128},
        Hyperparameter("depth", int, 20, "6n+2 with n >= 1: 8, 14, 20, ..., 56, 62", _resnet_depth),
        Hyperparameter("filters", int, 16, "> 0 (doubled at each of the 3 stages)", _positive),
    ),
    _family(
        "smallcnn",
        ("cifar10",),
        "two convolutions, 39,558 parameters (the seeds' small CIFAR-10 CNN)",
        {"optimizer": "adam", "batch_size": 64},
        dropout_hyperparameter(0.0),
    ),
    _family(
        "bilstm",
        ("imdb",),
        "embedding, bidirectional LSTM, cuDNN-eligible (Keras' imdb_bidirectional_lstm example)",
        {"optimizer": "adam", "batch_size": 32},
        _VOCAB,
        Hyperparameter("maxlen", int, 100, "> 0 (words kept per review)", _positive),
        Hyperparameter("embedding_dim", int, 128, "> 0", _positive),
        Hyperparameter("units", int, 64, "> 0 (per direction)", _positive),
        dropout_hyperparameter(0.5),
    ),
    _family(
        "fasttext",
        ("imdb",),
        "averaged word embeddings (Keras' imdb_fasttext example, unigrams)",
        {"optimizer": "adam", "batch_size": 32},
        _VOCAB,
        Hyperparameter("maxlen", int, 400, "> 0 (words kept per review)", _positive),
        Hyperparameter("embedding_dim", int, 50, "> 0", _positive),
    ),
    _family(
        "char_lstm",
        ("nietzsche",),
        "character-level LSTM text generation (Keras' lstm_text_generation example)",
        {"learning_rate": 0.01},
        Hyperparameter("maxlen", int, 40, "> 0 (characters of context)", _positive),
        Hyperparameter("units", int, 128, "> 0", _positive),
    ),
)

# RBF kernel ridge classification on NumPy (CPU) or CuPy (GPU): every alpha of a
# (gamma, train_size, dtype) group shares one trial's Gram matrices.
KERNEL_RIDGE = Workload(
    name="kernel_ridge",
    datasets=("digits", "mnist"),
    hyperparameters=(
        Hyperparameter("gamma", float, 0.02, "> 0", _positive),
        Hyperparameter("alpha", float, 0.1, "> 0", _positive),
        Hyperparameter("train_size", int, 0, ">= 0 (0: the whole training set)", lambda v: v >= 0),
        Hyperparameter("dtype", str, "float32", choices=("float32", "float64")),
        Hyperparameter("solver", str, "auto", choices=("auto", "cholesky", "eigh")),
    ),
    train="gridbench.workloads.kernel_ridge",
    framework="numpy/cupy",
    inner_axis="alpha",
    train_metric="fit_s",
    description="RBF kernel ridge classification, NumPy or CuPy",
)

WORKLOADS: dict[str, Workload] = {w.name: w for w in (MLP, *FAMILIES, KERNEL_RIDGE)}


def get_workload(name: str, where: str) -> Workload:
    try:
        return WORKLOADS[name]
    except KeyError:
        raise UserError(f"{where}: unknown model {name!r}; known: {', '.join(WORKLOADS)}") from None
