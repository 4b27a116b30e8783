"""The trial's side of the data: read a located dataset (or make synthetic data) as arrays."""

from __future__ import annotations

import functools
import pickle
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from gridbench.datasets import (
    CIFAR10_FILES,
    IMDB_ARRAYS,
    IMDB_INDEX_FROM,
    IMDB_OOV,
    IMDB_START,
    MNIST_ARRAYS,
    SHAPES,
    TEXT_STEP,
    TEXT_TEST_FRACTION,
    Dataset,
    DataSource,
)
from gridbench.datasets.npz import read_arrays


def load(source: DataSource, seed: int, flat: bool = True, options: Mapping[str, Any] | None = None) -> Dataset:
    """The dataset as arrays; images flattened to one row each when `flat`.

    `options` are the trial's hyperparameters, for the text datasets' shaping:
    `vocab_size` and `maxlen` (IMDb), `maxlen` (the character-level corpus).
    """
    options = options or {}
    if source.synthetic:
        data = synthetic(source.name, seed, options)
    elif source.user is not None:
        from gridbench.datasets.user_data import read as read_user

        data = read_user(source.user)
    elif source.name == "digits":
        data = _load_digits(seed)
    else:
        data = LOADERS[source.name](Path(source.path), options)
    if flat and data.x_train.ndim > 2:
        data = Dataset(
            data.name,
            data.x_train.reshape(len(data.x_train), -1),
            data.y_train,
            data.x_test.reshape(len(data.x_test), -1),
            data.y_test,
            data.num_classes,
            data.synthetic,
        )
    return data


# The hyperparameters that shape a loaded dataset (the text datasets' and synthetic data's); others do not.
SHAPING_OPTIONS = ("maxlen", "vocab_size")
SHAPED_BY_OPTIONS = ("imdb", "nietzsche")  # the files whose reading they shape (LOADERS)


def load_shared(source: DataSource, seed: int, flat: bool = True, options: Mapping[str, Any] | None = None) -> Dataset:
    """`load`, kept for the process's next trial: a reused Ray worker reads and scales its data once.

    Trials never modify a Dataset's arrays (take_train and the sessions copy), so sharing them is safe.
    """
    options = options or {}
    shaped = source.synthetic or (source.user is None and source.name in SHAPED_BY_OPTIONS)
    # Only where they shape the data: a model that declares `maxlen` over mnist reads what a setup hook read for it
    shaping = tuple((key, options[key]) for key in SHAPING_OPTIONS if key in options) if shaped else ()
    return _load_cached(source, seed, flat, shaping)


@functools.lru_cache(maxsize=1)
def _load_cached(source: DataSource, seed: int, flat: bool, shaping: tuple) -> Dataset:
    return load(source, seed, flat, dict(shaping))


def _load_digits(seed: int) -> Dataset:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[..., np.newaxis]
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, stratify=digits.target, random_state=seed
    )
    return Dataset("digits", x_train, y_train, x_test, y_test, num_classes=10)


def _scale(images: np.ndarray) -> np.ndarray:
    return np.divide(images, np.float32(255), dtype=np.float32)  # one pass, no copy after it


def _load_mnist(path: Path, options) -> Dataset:
    arrays = read_arrays(path, MNIST_ARRAYS)  # each array inflated in one call (npz.py: beside the imports)
    return Dataset(
        "mnist",
        _scale(arrays["x_train"])[..., np.newaxis],
        arrays["y_train"].astype(np.int64),
        _scale(arrays["x_test"])[..., np.newaxis],
        arrays["y_test"].astype(np.int64),
        num_classes=10,
    )


# CIFAR-10's batches and IMDb's ragged reviews are pickles. Rebuilding a numpy array needs
# these globals and nothing else, so a tampered file cannot run code through a pickle.
_NUMPY_PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "_reconstruct"),  # written by numpy < 2
        ("numpy._core.multiarray", "_reconstruct"),
    }
)


class _NumpyOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _NUMPY_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: the file may be corrupt or malicious")


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One batch as the CIFAR authors pickled it: (images channel-first, labels)."""
    with open(path, "rb") as handle:
        batch = _NumpyOnlyUnpickler(handle, encoding="bytes").load()
    return batch[b"data"].reshape(-1, 3, 32, 32), np.asarray(batch[b"labels"])


def _read_npz_with_objects(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Like np.load(allow_pickle=True), but object arrays may hold numpy arrays and lists only."""
    return read_arrays(path, names, objects=lambda stream: _NumpyOnlyUnpickler(stream).load())


def _load_cifar10(path: Path, options) -> Dataset:
    def read(names):
        parts = [_read_cifar_batch(path / name) for name in names]
        images = np.concatenate([p[0] for p in parts]).transpose(0, 2, 3, 1)  # channels last, as Keras does
        return _scale(images), np.concatenate([p[1] for p in parts]).astype(np.int64)

    x_train, y_train = read(CIFAR10_FILES[:-1])
    x_test, y_test = read(CIFAR10_FILES[-1:])
    return Dataset("cifar10", x_train, y_train, x_test, y_test, num_classes=10)


def _load_imdb(path: Path, options) -> Dataset:
    """As keras.datasets.imdb.load_data(num_words=vocab_size) does, then padded to `maxlen` as Keras pads."""
    from keras.utils import pad_sequences

    vocab_size, maxlen = int(options.get("vocab_size", 20000)), int(options.get("maxlen", 100))
    archive = _read_npz_with_objects(path, IMDB_ARRAYS)

    def encode(reviews) -> np.ndarray:
        shifted = [
            [IMDB_START] + [w + IMDB_INDEX_FROM if w + IMDB_INDEX_FROM < vocab_size else IMDB_OOV for w in review]
            for review in reviews
        ]
        return pad_sequences(shifted, maxlen=maxlen, dtype="int32")

    return Dataset(
        "imdb",
        encode(archive["x_train"]),
        np.array(archive["y_train"], dtype=np.int64),  # a copy: the archive's arrays are read-only views
        encode(archive["x_test"]),
        np.array(archive["y_test"], dtype=np.int64),
        num_classes=2,
    )


def _load_text(path: Path, options) -> Dataset:
    """Character-level next-character prediction, as in Keras' text generation example."""
    maxlen = int(options.get("maxlen", 40))
    text = path.read_text(encoding="utf-8").lower().replace("\n", " ")
    alphabet = sorted(set(text))
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    indices = np.searchsorted(np.array([ord(c) for c in alphabet], dtype=np.uint32), codes).astype(np.int32)
    starts = np.arange(0, len(indices) - maxlen, TEXT_STEP)
    x = indices[starts[:, np.newaxis] + np.arange(maxlen)]
    y = indices[starts + maxlen].astype(np.int64)
    split = int(len(starts) * (1 - TEXT_TEST_FRACTION))
    return Dataset("nietzsche", x[:split], y[:split], x[split:], y[split:], num_classes=len(alphabet))


LOADERS = {"mnist": _load_mnist, "cifar10": _load_cifar10, "imdb": _load_imdb, "nietzsche": _load_text}


def synthetic(name: str, seed: int, options: Mapping[str, Any] | None = None) -> Dataset:
    """Random data of the real dataset's shapes and label count (uniform labels)."""
    options = options or {}
    shape = SHAPES[name]
    rng = np.random.default_rng(seed)

    def samples(n: int) -> np.ndarray:
        if shape.kind == "image":
            return _scale(rng.integers(0, 256, size=(n, *shape.sample_shape), dtype=np.uint8))
        maxlen = int(options.get("maxlen", 100))
        high = int(options.get("vocab_size", shape.num_classes))
        return rng.integers(1, high, size=(n, maxlen), dtype=np.int32)

    return Dataset(
        name,
        samples(shape.train),
        rng.integers(0, shape.num_classes, size=shape.train).astype(np.int64),
        samples(shape.test),
        rng.integers(0, shape.num_classes, size=shape.test).astype(np.int64),
        num_classes=shape.num_classes,
        synthetic=True,
    )


def take_train(data: Dataset, size: int, seed: int) -> Dataset:
    """The first `size` training samples of a seeded shuffle (0: all); the test set stays whole."""
    if not size or size >= len(data.x_train):
        if size > len(data.x_train):
            raise ValueError(f"train_size {size} is more than the {len(data.x_train)} training samples")
        return data
    keep = np.random.default_rng(seed).permutation(len(data.x_train))[:size]
    return Dataset(
        data.name, data.x_train[keep], data.y_train[keep], data.x_test, data.y_test, data.num_classes, data.synthetic
    )
