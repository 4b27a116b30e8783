"""Datasets: found and checked in the driver (find.py), loaded inside each trial (load.py).

`find.locate` runs before a search starts, so a missing or corrupt file is a user
error that writes nothing; `load.load` runs in the trial and is part of its setup time.

Files keep the layouts `keras.datasets` downloads and caches in ~/.keras/datasets,
so a user's existing cache, or a copy of it passed with --data-dir, works as is.
`--synthetic` replaces a dataset with random data of its real shapes and label
count: for speed-only runs where the data cannot be had; its accuracy means nothing.

This module holds what both sides share: the layouts' names and the records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

DATA_DIR_ENV = "GRIDBENCH_DATA_DIR"
MNIST_FILE = "mnist.npz"
# Keras' layout of mnist.npz: name -> (shape, dtype).
MNIST_ARRAYS = {
    "x_train": ((60000, 28, 28), np.uint8),
    "y_train": ((60000,), np.uint8),
    "x_test": ((10000, 28, 28), np.uint8),
    "y_test": ((10000,), np.uint8),
}
CIFAR10_DIR = "cifar-10-batches-py"  # the folder inside Keras' (and Toronto's) tarball
CIFAR10_FILES = (*(f"data_batch_{i}" for i in range(1, 6)), "test_batch")
IMDB_FILE = "imdb.npz"
IMDB_ARRAYS = ("x_train", "y_train", "x_test", "y_test")
# IMDb word indices as keras.datasets.imdb.load_data shifts them: 0 pads, 1 starts a review, 2 is out of vocabulary.
IMDB_START, IMDB_OOV, IMDB_INDEX_FROM = 1, 2, 3
NIETZSCHE_FILE = "nietzsche.txt"
# Where the Keras character-level text generation example downloads it from.
NIETZSCHE_URL = "https://s3.amazonaws.com/text-datasets/nietzsche.txt"
TEXT_STEP = 3  # one training sequence every 3 characters, as in that example
TEXT_TEST_FRACTION = 0.1  # the text's last 10% of sequences, held out


@dataclass(frozen=True)
class Dataset:
    name: str
    x_train: np.ndarray  # images: float32 in [0, 1], (n, height, width, channels) or flat; text: int32 indices
    y_train: np.ndarray  # integer class labels
    x_test: np.ndarray
    y_test: np.ndarray
    num_classes: int
    synthetic: bool = False


@dataclass(frozen=True)
class DataSource:
    """Where a trial finds its data: a dataset name and, for files, a checked path."""

    name: str
    path: str | None = None  # None for data bundled with a library (digits) and synthetic data
    synthetic: bool = False
    user: Any = None  # a user's own data: gridbench.datasets.user_data.UserData (hashable)

    @property
    def description(self) -> str:
        if self.user is not None:
            return self.user.description
        if self.synthetic:
            return "synthetic (random data of the real shapes; accuracy meaningless)"
        return self.path or "bundled with scikit-learn"


@dataclass(frozen=True)
class SyntheticShape:
    """The real dataset's sizes, which --synthetic reproduces with random values."""

    train: int
    test: int
    num_classes: int
    kind: str  # "image" (sample shape below) or "tokens" (a sequence of `maxlen` indices)
    sample_shape: tuple[int, ...] = ()


SHAPES = {
    "digits": SyntheticShape(1347, 450, 10, "image", (8, 8, 1)),
    "mnist": SyntheticShape(60000, 10000, 10, "image", (28, 28, 1)),
    "cifar10": SyntheticShape(50000, 10000, 10, "image", (32, 32, 3)),
    "imdb": SyntheticShape(25000, 25000, 2, "tokens"),
    # About the Nietzsche corpus of Keras' text generation example: 600,000 characters, 56 symbols.
    "nietzsche": SyntheticShape((600_000 // TEXT_STEP) * 9 // 10, (600_000 // TEXT_STEP) // 10, 56, "tokens"),
}
DATASETS = tuple(SHAPES)
