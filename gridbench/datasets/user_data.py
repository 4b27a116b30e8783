"""A user's own data: an .npz file, a `package.module:load` function, or arrays from Python.

Four arrays: x_train, y_train, x_test, y_test; classification with integer labels, the
number of classes read from the labels. `inspect` checks them in the driver (or its
check subprocess) before anything is written; `read` reads them inside each trial.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from gridbench.datasets import Dataset
from gridbench.errors import UserError

ARRAYS = ("x_train", "y_train", "x_test", "y_test")


@dataclass(frozen=True)
class UserData:
    """Where a user's data comes from; hashable (a worker caches what it read by it)."""

    kind: str  # "npz", "loader" or "arrays"
    reference: str  # the .npz's absolute path, "module:function", or "arrays"
    base_dir: str | None = None  # where a loader's module is looked for first
    digest: str = ""  # arrays: a hash of their bytes, so that two sets of arrays never share a cache entry
    payload: Any = field(default=None, compare=False, repr=False)  # the loader function or the arrays

    @property
    def description(self) -> str:
        return {"npz": self.reference, "loader": f"{self.reference}()", "arrays": f"arrays {self.digest}"}[self.kind]


def is_user_dataset(dataset: Any) -> bool:
    return not isinstance(dataset, str) or dataset.endswith(".npz") or ":" in dataset


def user_data(dataset: Any, where: str, base_dir: str | None) -> UserData:
    """The record for `dataset` (a path, "module:function", a function, or four arrays); nothing is read yet."""
    if callable(dataset):
        from gridbench.workloads.user_model import reference_of

        return UserData("loader", reference_of(dataset), payload=dataset)
    if isinstance(dataset, str) and dataset.endswith(".npz"):
        path = Path(dataset).expanduser()
        if not path.is_absolute() and base_dir:
            path = Path(base_dir) / path  # relative to the TOML
        return UserData("npz", str(path.resolve()))
    if isinstance(dataset, str):
        from gridbench.workloads.user_model import check_reference

        check_reference(dataset, "dataset", where)
        return UserData("loader", dataset, base_dir=base_dir)
    arrays = _as_arrays(dataset, "the arrays given")
    digest = hashlib.sha256()
    for name in ARRAYS:
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"{name}{array.dtype}{array.shape}".encode())
        digest.update(array.data)
    return UserData("arrays", "arrays", digest=digest.hexdigest()[:16], payload=arrays)


def _as_arrays(value: Any, what: str) -> dict[str, np.ndarray]:
    """Four arrays from a mapping (by name) or a sequence (in order), or a UserError naming what is missing."""
    if isinstance(value, Mapping) or hasattr(value, "files"):  # np.load's NpzFile is not a Mapping
        names = list(value.files) if hasattr(value, "files") else list(value)
        missing = [name for name in ARRAYS if name not in names]
        if missing:
            raise UserError(
                f"{what} lack(s) {', '.join(missing)}; give the four arrays {', '.join(ARRAYS)} "
                f"(found: {', '.join(map(str, names)) or 'none'})"
            )
        return {name: value[name] for name in ARRAYS}
    if isinstance(value, (tuple, list)) and len(value) == 4:
        return dict(zip(ARRAYS, value))
    raise UserError(
        f"{what} must be the four arrays {', '.join(ARRAYS)} (a tuple or a mapping), got {type(value).__name__}"
    )


def load_arrays(data: UserData) -> dict[str, np.ndarray]:
    """The four arrays, unchecked; a file that cannot be read, or a loader that fails, is a UserError."""
    if data.kind == "arrays":
        return dict(data.payload)
    if data.kind == "npz":
        try:
            with np.load(data.reference, allow_pickle=False) as archive:
                return _as_arrays(archive, data.reference)
        except UserError:
            raise
        except Exception as err:
            reason = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UserError(
                f"dataset {data.reference} cannot be read ({reason}); save it with "
                f"numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)"
            ) from None
    load = data.payload if data.payload is not None else _import_loader(data)
    try:
        returned = load()
    except Exception as err:
        raise UserError(f"dataset loader {data.reference} raised {type(err).__name__}: {_first_line(err)}") from None
    return _as_arrays(returned, f"what {data.reference} returned")


def _import_loader(data: UserData) -> Callable:
    from gridbench.workloads.user_model import import_callable

    return import_callable(data.reference, data.base_dir, "dataset loader")


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:300] if str(err) else "(no message)"


@dataclass(frozen=True)
class DataFacts:
    """What the driver learns from checking a user's data."""

    train: int
    test: int
    sample_shape: tuple[int, ...]
    num_classes: int
    train_bytes: int  # the training inputs as a trial holds them (4-byte floats or integers)


def inspect(arrays: Mapping[str, Any], what: str) -> DataFacts:
    """Checks the four arrays (shapes, lengths, labels, finite inputs); returns their facts or raises UserError."""
    x_train, y_train, x_test, y_test = (np.asarray(arrays[name]) for name in ARRAYS)
    for name, x in (("x_train", x_train), ("x_test", x_test)):
        if x.dtype.kind not in "biuf" or x.ndim < 2:
            raise UserError(
                f"{what}: {name} must be a numeric array of shape (samples, ...), got {x.dtype}{list(x.shape)}"
            )
    if x_train.shape[1:] != x_test.shape[1:]:
        raise UserError(
            f"{what}: x_train's samples are {x_train.shape[1:]} but x_test's {x_test.shape[1:]}; make them one shape"
        )
    for x_name, x, y_name, y in (("x_train", x_train, "y_train", y_train), ("x_test", x_test, "y_test", y_test)):
        if len(x) != len(y):
            raise UserError(
                f"{what}: {x_name} has {len(x)} samples but {y_name} {len(y)} labels; give one label per sample"
            )
        if len(x) == 0:
            raise UserError(f"{what}: {x_name} is empty; give it at least one sample")
        if y.ndim != 1 or y.dtype.kind not in "iu":
            raise UserError(
                f"{what}: {y_name} must be integer class labels of shape (samples,), got {y.dtype}{list(y.shape)}; "
                f"for one-hot labels pass labels.argmax(axis=1)"
            )
        if x.dtype.kind == "f" and not np.isfinite(x).all():
            bad = int(np.size(x) - np.count_nonzero(np.isfinite(x)))
            raise UserError(f"{what}: {x_name} holds {bad} NaN or infinite value(s); clean or impute them first")
    num_classes = int(y_train.max()) + 1
    for y_name, y in (("y_train", y_train), ("y_test", y_test)):
        low, high = int(y.min()), int(y.max())
        if low < 0 or high >= num_classes:
            raise UserError(
                f"{what}: {y_name} holds label {low if low < 0 else high}, out of range: classes are read from "
                f"y_train as 0..{num_classes - 1}; number classes from 0, and let the training set hold each one"
            )
    return DataFacts(
        train=len(x_train),
        test=len(x_test),
        sample_shape=tuple(int(d) for d in x_train.shape[1:]),
        num_classes=num_classes,
        train_bytes=int(x_train.size) * 4,
    )


def read_inputs(x: Any) -> np.ndarray:
    """Inputs as a trial trains on them: integers of 2 bytes or more stay integers (token indices), as int32;
    the rest become float32, unscaled."""
    x = np.asarray(x)
    return x.astype(np.int32 if x.dtype.kind in "iu" and x.dtype.itemsize > 1 else np.float32, copy=False)


def read(data: UserData) -> Dataset:
    """Inside a trial: the arrays as a Dataset (inputs as float32, or int32 for integer tokens)."""
    arrays = load_arrays(data)
    y_train, y_test = (np.asarray(arrays[name]).astype(np.int64) for name in ("y_train", "y_test"))
    return Dataset(
        data.description,
        read_inputs(arrays["x_train"]),
        y_train,
        read_inputs(arrays["x_test"]),
        y_test,
        num_classes=int(y_train.max()) + 1,
    )
