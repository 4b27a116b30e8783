"""Datasets: located and checked in the driver, loaded inside each trial.

`locate` runs before a search starts, so a missing or corrupt file is a user error
that writes nothing; `load` runs in the trial and is part of its setup time.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gridbench.errors import UserError

DATA_DIR_ENV = "GRIDBENCH_DATA_DIR"
MNIST_FILE = "mnist.npz"
# Keras' layout of mnist.npz: name -> (shape, dtype).
MNIST_ARRAYS = {
    "x_train": ((60000, 28, 28), np.uint8),
    "y_train": ((60000,), np.uint8),
    "x_test": ((10000, 28, 28), np.uint8),
    "y_test": ((10000,), np.uint8),
}


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # float32, scaled to [0, 1], one row per sample
    y_train: np.ndarray  # integer class labels
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int


@dataclass(frozen=True)
class DataSource:
    """Where a trial finds its data: a dataset name and, for files, a checked path."""

    name: str
    path: str | None = None  # None for data bundled with a library (digits)


def keras_cache_dir() -> Path:
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def locate(name: str, data_dir: str | None = None) -> DataSource:
    """Finds the dataset's file (downloading it through Keras if needed) and checks it."""
    if name == "digits":
        return DataSource("digits")
    if name != "mnist":
        raise UserError(f"unknown dataset {name!r}; known: digits, mnist")

    looked = []
    for directory in (data_dir, os.environ.get(DATA_DIR_ENV), keras_cache_dir()):
        if not directory:
            continue
        path = Path(directory).expanduser() / MNIST_FILE
        looked.append(str(path))
        if path.is_file():
            check_mnist_file(path)
            return DataSource("mnist", str(path.resolve()))

    path = _download_mnist(looked)
    check_mnist_file(path)
    return DataSource("mnist", str(path.resolve()))


def _download_mnist(looked: list[str]) -> Path:
    # Keras' own download, which caches the file as ~/.keras/datasets/mnist.npz.
    # Importing Keras is slow, so this runs only when no local copy exists.
    try:
        from keras.datasets import mnist

        mnist.load_data(path=MNIST_FILE)
    except Exception as err:  # any network or checksum failure means: not available here
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(
            f"MNIST not found (looked in {', '.join(looked)}) and Keras' download failed ({reason}); "
            f"put Keras' mnist.npz in a directory and pass --data-dir DIR or set {DATA_DIR_ENV}=DIR"
        ) from None
    return keras_cache_dir() / MNIST_FILE


def check_mnist_file(path: Path) -> None:
    try:
        with np.load(path, allow_pickle=False) as archive:
            for key, (shape, dtype) in MNIST_ARRAYS.items():
                if key not in archive.files:
                    raise ValueError(f"no array {key!r}")
                array = archive[key]
                if array.shape != shape or array.dtype != dtype:
                    raise ValueError(
                        f"{key} is {array.dtype}{list(array.shape)}, expected {np.dtype(dtype)}{list(shape)}"
                    )
    except Exception as err:
        raise UserError(
            f"{path} is not a valid mnist.npz ({err}); replace it with Keras' mnist.npz "
            f"(x_train, y_train, x_test, y_test) or point --data-dir elsewhere"
        ) from None


def load(source: DataSource, seed: int) -> Dataset:
    if source.name == "digits":
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        digits = load_digits()
        x = (digits.data / 16.0).astype(np.float32)
        x_train, x_test, y_train, y_test = train_test_split(
            x, digits.target, test_size=0.25, stratify=digits.target, random_state=seed
        )
        return Dataset("digits", x_train, y_train, x_test, y_test, num_classes=10)

    with np.load(source.path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in MNIST_ARRAYS}

    def scale(images: np.ndarray) -> np.ndarray:
        return (images.reshape(len(images), -1) / np.float32(255)).astype(np.float32)

    return Dataset(
        "mnist",
        scale(arrays["x_train"]),
        arrays["y_train"].astype(np.int64),
        scale(arrays["x_test"]),
        arrays["y_test"].astype(np.int64),
        num_classes=10,
    )
