"""Dataset location and loading: the search order, and clear errors for missing or corrupt files."""

from __future__ import annotations

import dataclasses
import os
import re
import sys
import types

import numpy as np
import pytest

from gridbench import datasets
from gridbench.datasets import find, npz, trial_data
from gridbench.errors import UserError


def make_mnist(directory, corrupt: bool = False):
    """A file in Keras' mnist.npz layout (zeros: only shapes and dtypes matter here)."""
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {key: np.zeros(shape, dtype) for key, (shape, dtype) in datasets.MNIST_ARRAYS.items()}
    if corrupt:
        arrays["x_train"] = arrays["x_train"][:100]
    np.savez_compressed(directory / "mnist.npz", **arrays)
    return directory / "mnist.npz"


@pytest.fixture
def no_keras_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.delenv(datasets.DATA_DIR_ENV, raising=False)


def test_data_dir_comes_first_then_the_environment_then_keras_cache(tmp_path, monkeypatch, no_keras_cache):
    cache = make_mnist(tmp_path / "keras-home" / "datasets")
    env = make_mnist(tmp_path / "env")
    given = make_mnist(tmp_path / "given")
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path / "env"))
    assert find.locate("mnist", str(tmp_path / "given")).path == str(given)
    assert find.locate("mnist").path == str(env)
    monkeypatch.delenv(datasets.DATA_DIR_ENV)
    assert find.locate("mnist").path == str(cache)


def test_corrupt_file_is_a_user_error(tmp_path, no_keras_cache):
    make_mnist(tmp_path / "bad", corrupt=True)
    with pytest.raises(UserError, match=r"is not a valid mnist.npz \(x_train is uint8\[100, 28, 28\]"):
        find.locate("mnist", str(tmp_path / "bad"))


def test_not_a_zip_file_is_a_user_error(tmp_path, no_keras_cache):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "mnist.npz").write_bytes(b"not an archive")
    with pytest.raises(UserError, match="is not a valid mnist.npz"):
        find.locate("mnist", str(tmp_path / "junk"))


def test_missing_file_offline_says_where_it_looked_and_how_to_fix(tmp_path, monkeypatch, no_keras_cache):
    # Keras' download, replaced by one that fails as an offline machine does.
    def load_data(path):
        raise Exception("URL fetch failure: [Errno -3] Temporary failure in name resolution")

    keras = types.ModuleType("keras")
    keras_datasets = types.ModuleType("keras.datasets")
    keras_datasets.mnist = types.SimpleNamespace(load_data=load_data)
    keras.datasets = keras_datasets
    monkeypatch.setitem(sys.modules, "keras", keras)
    monkeypatch.setitem(sys.modules, "keras.datasets", keras_datasets)
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(UserError) as caught:
        find.locate("mnist")
    message = str(caught.value)
    assert str(tmp_path / "empty" / "mnist.npz") in message
    assert str(tmp_path / "keras-home" / "datasets" / "mnist.npz") in message
    assert "Temporary failure in name resolution" in message
    assert "--data-dir" in message and datasets.DATA_DIR_ENV in message


@pytest.mark.parametrize("given, message", [
    ("missing", "does not exist; give the directory that holds mnist.npz, or leave --data-dir out"),
    ("a-file", "is a file, not a directory"),
    ("empty", "has no mnist.npz; put Keras' mnist.npz there"),
])  # fmt: skip
def test_an_explicit_data_dir_is_the_data_or_an_error_never_another_copy(tmp_path, monkeypatch, given, message):
    make_mnist(tmp_path / "keras-home" / "datasets")
    make_mnist(tmp_path / "env")
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path / "env"))
    (tmp_path / "a-file").write_text("not a directory")
    (tmp_path / "empty").mkdir()

    def download():
        raise AssertionError("an explicit --data-dir must never download")

    monkeypatch.setitem(find.LAYOUTS, "mnist", dataclasses.replace(find.LAYOUTS["mnist"], download=download))
    with pytest.raises(UserError, match=re.escape(f"--data-dir {tmp_path / given} {message}")):
        find.locate("mnist", str(tmp_path / given))


@pytest.mark.parametrize("error, shown", [(UserError("one line"), ""), (ValueError("a bug"), "banner\n")])
def test_framework_output_is_held_back_before_a_user_error_and_shown_for_a_bug(capfd, error, shown):
    import os

    with pytest.raises(type(error)):
        with find.framework_output_held():
            os.write(2, b"banner\n")  # as TensorFlow's C++ side writes, below Python's sys.stderr
            raise error
    assert capfd.readouterr().err == shown


def test_digits_are_bundled_and_split_stratified():
    data = trial_data.load(find.locate("digits"), seed=0)
    assert data.x_train.dtype == np.float32 and data.x_train.shape[1] == 64
    assert len(data.x_train) + len(data.x_test) == 1797
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    assert set(np.unique(data.y_test)) == set(range(10))


def test_real_mnist_loads_scaled_and_flat(mnist_dir):
    data = trial_data.load(find.locate("mnist", str(mnist_dir)), seed=0)
    assert data.x_train.shape == (60000, 784) and data.x_test.shape == (10000, 784)
    assert data.x_train.dtype == np.float32 and data.x_train.max() == 1.0
    # The label counts the README beside the file gives.
    assert np.bincount(data.y_train).tolist() == [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def test_a_tampered_pickle_in_a_dataset_file_is_refused_not_run(tmp_path):
    """CIFAR-10 batches and IMDb's reviews are pickles: only numpy arrays may come out of them."""
    import pickle

    from datafiles import make_cifar10, make_imdb

    folder = make_cifar10(tmp_path)
    # Any global but numpy's (not print: Ray replaces builtins.print in a process that imported it).
    (folder / "test_batch").write_bytes(pickle.dumps({b"data": os.system, b"labels": []}))
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to unpickle (posix|os)\.system"):
        trial_data.load(find.locate("cifar10", str(tmp_path)), seed=0, flat=False)
    imdb = make_imdb(tmp_path / "imdb")
    with np.load(imdb, allow_pickle=True) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays["x_test"] = np.array([os.system], dtype=object)
    np.savez(imdb, **arrays)
    with pytest.raises(pickle.UnpicklingError, match=r"refusing to unpickle (posix|os)\.system"):
        trial_data.load(find.locate("imdb", str(tmp_path / "imdb")), seed=0, flat=False)


@pytest.mark.parametrize("save", [np.savez_compressed, np.savez])
def test_npz_reader_gives_np_loads_arrays(tmp_path, save):
    rng = np.random.default_rng(0)
    arrays = {
        "images": rng.integers(0, 256, size=(50, 7, 3), dtype=np.uint8),
        "fortran": np.asfortranarray(rng.normal(size=(4, 6)).astype(np.float32)),
        "big_endian": rng.integers(0, 1000, size=9).astype(">i4"),
        "labels": rng.integers(0, 10, size=50, dtype=np.int64),
        "scalar": np.array(3.5),
    }
    save(tmp_path / "a.npz", **arrays)
    read = npz.read_arrays(tmp_path / "a.npz", arrays)
    with np.load(tmp_path / "a.npz") as loaded:
        for key in arrays:
            assert read[key].dtype == loaded[key].dtype and read[key].shape == loaded[key].shape
            np.testing.assert_array_equal(read[key], loaded[key])
    headers = npz.array_headers(tmp_path / "a.npz", ["fortran", "big_endian", "absent"])
    assert headers == {"fortran": ((4, 6), np.dtype(np.float32)), "big_endian": ((9,), np.dtype(">i4"))}


def _archive(path, members: dict[str, bytes]) -> None:
    import zipfile

    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _npy(array: np.ndarray, version=None) -> bytes:
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version)
    return buffer.getvalue()


def test_npz_reader_reads_every_npy_version_and_a_long_header(tmp_path):
    # A structured dtype of 300 fields has a header of several KiB; a UTF-8 field name needs format 3.0.
    wide = np.zeros(3, dtype=[(f"field{i}", "<f4") for i in range(300)])
    named = np.zeros(2, dtype=[("字", "<i2")])
    members = {"v1.npy": _npy(np.arange(5), (1, 0)), "v2.npy": _npy(np.arange(5), (2, 0))}
    members |= {"wide.npy": _npy(wide), "named.npy": _npy(named, (3, 0))}
    _archive(tmp_path / "a.npz", members)
    read = npz.read_arrays(tmp_path / "a.npz", ["v1", "v2", "wide", "named"])
    assert read["v1"].tolist() == read["v2"].tolist() == [0, 1, 2, 3, 4]
    assert read["wide"].dtype == wide.dtype and read["named"].dtype.names == ("字",)
    headers = npz.array_headers(tmp_path / "a.npz", ["v1", "v2", "wide"])
    assert headers["v2"] == ((5,), np.arange(5).dtype) and headers["wide"] == ((3,), wide.dtype)


def test_npz_reader_names_the_array_it_cannot_read(tmp_path):
    np.savez(tmp_path / "objects.npz", ragged=np.array([[1], [2, 3]], dtype=object), plain=np.zeros(2))
    with pytest.raises(ValueError, match="^ragged: Object arrays cannot be loaded"):
        npz.read_arrays(tmp_path / "objects.npz", ["ragged"])
    with pytest.raises(KeyError):
        npz.read_arrays(tmp_path / "objects.npz", ["absent"])
    whole = _npy(np.arange(1000))
    _archive(tmp_path / "short.npz", {"cut.npy": whole[:-100], "magic.npy": b"\x93NUMPY\x09\x00 junk"})
    with pytest.raises(ValueError, match="^cut: "):
        npz.read_arrays(tmp_path / "short.npz", ["cut"])
    with pytest.raises(ValueError, match="^magic: .npy format version 9.0"):
        npz.array_headers(tmp_path / "short.npz", ["magic"])


def test_mnist_loads_scaled_as_before(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {
        key: rng.integers(0, 256, size=shape, dtype=dtype) for key, (shape, dtype) in datasets.MNIST_ARRAYS.items()
    }
    path = tmp_path / "mnist.npz"
    np.savez_compressed(path, **arrays)
    expected = (arrays["x_train"] / np.float32(255)).astype(np.float32)  # the way before npz.read_arrays
    data = trial_data.load(datasets.DataSource("mnist", str(path)), seed=0, flat=False)
    assert data.x_train.dtype == np.float32 and data.x_train.shape == (60000, 28, 28, 1)
    np.testing.assert_array_equal(data.x_train[..., 0], expected)
    np.testing.assert_array_equal(data.y_test, arrays["y_test"].astype(np.int64))
