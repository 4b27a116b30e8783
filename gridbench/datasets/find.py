"""The driver's side of the data: find a dataset's files, check them, download through Keras if needed."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from gridbench.datasets import (
    CIFAR10_DIR,
    CIFAR10_FILES,
    DATA_DIR_ENV,
    DATASETS,
    IMDB_ARRAYS,
    IMDB_FILE,
    MNIST_ARRAYS,
    MNIST_FILE,
    NIETZSCHE_FILE,
    NIETZSCHE_URL,
    SHAPES,
    DataSource,
)
from gridbench.datasets.npz import array_headers
from gridbench.errors import UserError, stderr_into


def keras_cache_dir() -> Path:
    return Path(os.environ.get("KERAS_HOME", Path.home() / ".keras")) / "datasets"


def locate(name: str, data_dir: str | None = None, synthetic: bool = False) -> DataSource:
    """Finds the dataset's file (downloading it through Keras if needed) and checks it."""
    if name not in SHAPES:
        raise UserError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}")
    if synthetic:
        return DataSource(name, synthetic=True)
    if name == "digits":
        if data_dir:  # scikit-learn's own copy is read, but a --data-dir that is not there is still a typo
            _check_given_directory(Path(data_dir).expanduser(), "digits comes with scikit-learn and reads no file")
        return DataSource("digits")
    layout = LAYOUTS[name]
    if data_dir:  # the user's choice: its data or an error, never another copy (a typo would measure other data)
        path = _given_entry(Path(data_dir).expanduser(), layout)
        layout.check(path)
        return DataSource(name, str(path.resolve()))
    looked = []
    for directory in (os.environ.get(DATA_DIR_ENV), *(keras_cache_dir() / c for c in layout.cached)):
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


def on_disk(name: str) -> bool:
    """Whether a search of this dataset reads it without a download: bundled (digits), or already in
    $GRIDBENCH_DATA_DIR or Keras' cache (not checked here: `search` checks it)."""
    if name == "digits":
        return True
    layout = LAYOUTS.get(name)
    if layout is None:
        return False
    directories = (os.environ.get(DATA_DIR_ENV), *(keras_cache_dir() / c for c in layout.cached))
    return any(directory and (Path(directory).expanduser() / layout.entry).exists() for directory in directories)


def _given_entry(directory: Path, layout: _Layout) -> Path:
    """The dataset's file or folder in an explicit --data-dir; a UserError naming the directory if it is not there."""
    elsewhere = f"or leave --data-dir out to use ${DATA_DIR_ENV}, Keras' cache or Keras' download"
    _check_given_directory(directory, f"give the directory that holds {layout.entry}, {elsewhere}")
    path = directory / layout.entry
    if not path.exists():
        raise UserError(f"--data-dir {directory} has no {layout.entry}; put Keras' {layout.entry} there, {elsewhere}")
    return path


def _check_given_directory(directory: Path, advice: str) -> None:
    if not directory.exists():
        raise UserError(f"--data-dir {directory} does not exist; {advice}")
    if not directory.is_dir():
        raise UserError(f"--data-dir {directory} is a file, not a directory; {advice}")


@contextlib.contextmanager
def framework_output_held():
    """Holds back what is written to this process's stderr (file descriptor 2) meanwhile.

    Importing Keras imports TensorFlow, whose C++ side writes its banner to descriptor 2
    (absl's "All log messages before absl::InitializeLog()", oneDNN's notice), whatever
    TF_CPP_MIN_LOG_LEVEL says: the one-line error that may follow must come alone. The
    held text is dropped, unless something other than a UserError escapes (then it is
    written out, for the traceback's sake).
    """
    with tempfile.TemporaryFile() as held:
        try:
            with stderr_into(held):
                yield
        except UserError:
            raise
        except BaseException:
            held.seek(0)
            os.write(2, held.read())
            raise


def _download(name: str, layout: _Layout, looked: list[str]) -> Path:
    # Keras' own download, which caches the file under ~/.keras/datasets. Importing
    # Keras is slow, so this runs only when no local copy exists.
    with framework_output_held():  # the error is raised inside: TensorFlow's banner never comes before it
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
    """The archive's arrays by their headers alone: reading them whole took 0.31 s on an H100's host before Ray could
    start, and a trial reads them anyway (data damaged inside a member fail its trials, with an error naming it)."""
    try:
        headers = array_headers(path, MNIST_ARRAYS)
        for key, (shape, dtype) in MNIST_ARRAYS.items():
            if key not in headers:
                raise ValueError(f"no array {key!r}")
            found_shape, found_dtype = headers[key]
            if found_shape != shape or found_dtype != dtype:
                raise ValueError(f"{key} is {found_dtype}{list(found_shape)}, expected {np.dtype(dtype)}{list(shape)}")
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
