"""Datasets: located and checked in the driver, loaded inside each trial.

`locate` runs before a search starts, so a missing or corrupt file is a user error
that writes nothing; `load` runs in the trial and is part of its setup time.

Files keep the layouts `keras.datasets` downloads and caches in ~/.keras/datasets,
so a user's existing cache, or a copy of it passed with --data-dir, works as is.
`--synthetic` replaces a dataset with random data of its real shapes and label
count: for speed-only runs where the data cannot be had; its accuracy means nothing.
"""

from __future__ import annotations

import functools
import io
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

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

    @property
    def description(self) -> str:
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


def keras_cache_dir() -> Path:
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def locate(name: str, data_dir: str | None = None, synthetic: bool = False) -> DataSource:
    """Finds the dataset's file (downloading it through Keras if needed) and checks it."""
    if name not in SHAPES:
        raise UserError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    if synthetic:
        return DataSource(name, synthetic=True)
    if name == "digits":
        return DataSource("digits")
    layout = LAYOUTS[name]
    looked = []
    for directory in (data_dir, os.environ.get(DATA_DIR_ENV), *(keras_cache_dir() / c for c in layout.cached)):
        if not directory:
            continue
        path = Path(directory).expanduser() / layout.entry
        looked.append(str(path))
        if path.exists():
            layout.check(path)
            return DataSource(name, str(path.resolve()))
    path = _download(name, layout, looked)
    layout.check(path)
    return DataSource(name, str(path.resolve()))


def _download(name: str, layout: _Layout, looked: list[str]) -> Path:
    # Keras' own download, which caches the file under ~/.keras/datasets. Importing
    # Keras is slow, so this runs only when no local copy exists.
    try:
        layout.download()
    except Exception as err:  # any network or checksum failure means: not available here
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise UserError(
            f"{name} not found (looked in {', '.join(looked)}) and Keras' download failed ({reason}); "
            f"put Keras' {layout.entry} in a directory and pass --data-dir DIR or set {DATA_DIR_ENV}=DIR, "
            f"or pass --synthetic for a speed-only run on random data of the same shapes"
        ) from None
    for cached in layout.cached:
        if (keras_cache_dir() / cached / layout.entry).exists():
            return keras_cache_dir() / cached / layout.entry
    raise UserError(f"Keras downloaded {name} but {layout.entry} is not under {keras_cache_dir()}")


def _not_valid(path: Path, what: str, err: Exception | str) -> UserError:
    return UserError(f"{path} is not a valid {what} ({err}); replace it with Keras' copy or point --data-dir elsewhere")


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


def check_cifar10_dir(path: Path) -> None:
    missing = [f for f in CIFAR10_FILES if not (path / f).is_file()]
    if missing:
        raise _not_valid(path, "CIFAR-10 folder", f"missing {', '.join(missing)}")


def check_imdb_file(path: Path) -> None:
    try:
        with np.load(path, allow_pickle=False) as archive:  # lists the arrays without unpickling them
            missing = [key for key in IMDB_ARRAYS if key not in archive.files]
    except Exception as err:
        raise _not_valid(path, "imdb.npz", err) from None
    if missing:
        raise _not_valid(path, "imdb.npz", f"no array {', '.join(missing)}")


def check_text_file(path: Path) -> None:
    if not path.is_file() or path.stat().st_size < 1000:
        raise _not_valid(path, "text corpus", "under 1,000 bytes")


@dataclass(frozen=True)
class _Layout:
    entry: str  # the file or folder a data directory holds
    cached: tuple[str, ...]  # where under ~/.keras/datasets Keras' download leaves it
    check: Callable[[Path], None]
    download: Callable[[], Any]


def _keras_download(dataset: str) -> Callable[[], Any]:
    def download():
        import importlib

        importlib.import_module(f"keras.datasets.{dataset}").load_data()

    return download


def _keras_mnist():
    from keras.datasets import mnist

    mnist.load_data(path=MNIST_FILE)


def _download_nietzsche():
    from keras.utils import get_file

    get_file(NIETZSCHE_FILE, origin=NIETZSCHE_URL)


LAYOUTS = {
    "mnist": _Layout(MNIST_FILE, ("",), check_mnist_file, _keras_mnist),
    "cifar10": _Layout(CIFAR10_DIR, ("cifar-10-batches-py-target",), check_cifar10_dir, _keras_download("cifar10")),
    "imdb": _Layout(IMDB_FILE, ("",), check_imdb_file, _keras_download("imdb")),
    "nietzsche": _Layout(NIETZSCHE_FILE, ("",), check_text_file, _download_nietzsche),
}


def load(source: DataSource, seed: int, flat: bool = True, options: Mapping[str, Any] | None = None) -> Dataset:
    """The dataset as arrays; images flattened to one row each when `flat`.

    `options` are the trial's hyperparameters, for the text datasets' shaping:
    `vocab_size` and `maxlen` (IMDb), `maxlen` (the character-level corpus).
    """
    options = options or {}
    if source.synthetic:
        data = synthetic(source.name, seed, options)
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


# The hyperparameters that shape a loaded dataset (the text datasets'); others do not.
SHAPING_OPTIONS = ("maxlen", "vocab_size")


def load_shared(source: DataSource, seed: int, flat: bool = True, options: Mapping[str, Any] | None = None) -> Dataset:
    """`load`, kept for the process's next trial: a reused Ray worker reads and scales its data once.

    Trials never modify a Dataset's arrays (take_train and the sessions copy), so sharing them is safe.
    """
    shaping = tuple((key, (options or {})[key]) for key in SHAPING_OPTIONS if key in (options or {}))
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
    return (images / np.float32(255)).astype(np.float32)


def _load_mnist(path: Path, options) -> Dataset:
    with np.load(path, allow_pickle=False) as archive:
        arrays = {key: archive[key] for key in MNIST_ARRAYS}
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
    arrays = {}
    with zipfile.ZipFile(path) as archive:
        for name in names:
            with archive.open(f"{name}.npy") as member:
                stream = io.BytesIO(member.read())
            try:
                arrays[name] = np.lib.format.read_array(stream, allow_pickle=False)
            except ValueError:  # an object array: its data is a pickle after the header
                stream.seek(0)
                major, _ = np.lib.format.read_magic(stream)
                # Format 3.0 differs from 2.0 only in the header's text encoding.
                (np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0)(stream)
                arrays[name] = _NumpyOnlyUnpickler(stream).load()
    return arrays


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
        np.asarray(archive["y_train"], dtype=np.int64),
        encode(archive["x_test"]),
        np.asarray(archive["y_test"], dtype=np.int64),
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
