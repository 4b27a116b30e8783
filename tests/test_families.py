"""The seeds' model families: their loaders on self-made files in Keras' layouts,
synthetic data, the models' sizes, and each family's experiment as a tiny real search."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from datafiles import make_cifar10, make_imdb, make_text
from stores import new_store
from trainings import PROGRAMS, run_python

from gridbench import datasets
from gridbench.datasets import find, trial_data
from gridbench.errors import UserError
from gridbench.spec import load_spec
from gridbench.workloads import WORKLOADS

FAMILY_EXPERIMENTS = {
    "mnist-cnn": "cnn",
    "cifar10-cnn": "vgg",
    "cifar10-resnet": "resnet",
    "cifar10-smallcnn": "smallcnn",
    "imdb-bilstm": "bilstm",
    "imdb-fasttext": "fasttext",
    "text-lstm": "char_lstm",
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("keras-datasets")
    make_cifar10(directory)
    make_imdb(directory)
    make_text(directory)
    return directory


def test_every_family_has_an_experiment_on_its_dataset():
    for name, model in FAMILY_EXPERIMENTS.items():
        spec = load_spec(name)
        assert spec.model == model and spec.dataset in WORKLOADS[model].datasets
        assert spec.grid_size >= 4, name  # a grid, not one configuration


def test_cifar10_loads_channels_last_and_scaled(data_dir):
    data = trial_data.load(find.locate("cifar10", str(data_dir)), seed=0, flat=False)
    assert data.x_train.shape == (200, 32, 32, 3) and data.x_test.shape == (40, 32, 32, 3)
    assert data.x_train.dtype == np.float32 and 0 <= data.x_train.min() and data.x_train.max() <= 1
    # datafiles brightens plane (label % 3): channel-last order must keep that plane.
    planes = data.x_train.mean(axis=(1, 2)).argmax(axis=1)
    assert (planes == data.y_train % 3).all()


def test_imdb_is_encoded_as_keras_encodes_it(data_dir):
    raw = np.load(data_dir / "imdb.npz", allow_pickle=True)["x_train"]
    data = trial_data.load(find.locate("imdb", str(data_dir)), 0, flat=False, options={"vocab_size": 200, "maxlen": 80})
    assert data.x_train.shape == (64, 80) and data.x_train.dtype == np.int32 and data.num_classes == 2
    first = data.x_train[0][data.x_train[0] > 0]
    expected = [1] + [w + 3 if w + 3 < 200 else 2 for w in raw[0]]  # start mark, shifted, out of vocabulary
    assert first.tolist() == expected[-80:]
    assert (data.x_train[0][: 80 - len(first)] == 0).all()  # padded in front, as pad_sequences pads


def test_text_sequences_predict_the_next_character(data_dir):
    data = trial_data.load(find.locate("nietzsche", str(data_dir)), 0, flat=False, options={"maxlen": 10})
    text = (data_dir / "nietzsche.txt").read_text().lower().replace("\n", " ")
    alphabet = sorted(set(text))
    decode = lambda row: "".join(alphabet[i] for i in row)  # noqa: E731
    assert decode(data.x_train[1]) == text[3:13] and alphabet[data.y_train[1]] == text[13]
    assert data.num_classes == len(alphabet)
    assert len(data.x_test) == pytest.approx(0.1 * (len(data.x_train) + len(data.x_test)), abs=1)


def test_a_missing_dataset_says_how_to_get_it_or_run_synthetic(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras-home"))
    monkeypatch.setenv(datasets.DATA_DIR_ENV, str(tmp_path))  # no copy there (an explicit --data-dir would stop there)

    def offline():
        raise OSError("offline")

    monkeypatch.setitem(find.LAYOUTS, "cifar10", dataclasses.replace(find.LAYOUTS["cifar10"], download=offline))
    with pytest.raises(UserError, match=r"cifar10 not found .* \(offline\).*--data-dir DIR.*--synthetic"):
        find.locate("cifar10")


def test_an_incomplete_cifar10_folder_is_a_user_error(tmp_path):
    folder = make_cifar10(tmp_path)
    (folder / "data_batch_3").unlink()
    with pytest.raises(UserError, match="not a valid CIFAR-10 folder .*missing data_batch_3"):
        find.locate("cifar10", str(tmp_path))


@pytest.mark.parametrize("name", datasets.DATASETS)
def test_synthetic_data_has_the_real_shapes_and_label_count(name):
    shape = datasets.SHAPES[name]
    data = trial_data.synthetic(name, seed=1, options={"maxlen": 12, "vocab_size": 300})
    assert data.synthetic and data.num_classes == shape.num_classes
    assert len(data.x_train) == shape.train and len(data.x_test) == shape.test
    expected = shape.sample_shape if shape.kind == "image" else (12,)
    assert data.x_train.shape[1:] == expected
    assert set(np.unique(data.y_train)) == set(range(shape.num_classes))
    again = trial_data.synthetic(name, seed=1, options={"maxlen": 12, "vocab_size": 300})
    assert np.array_equal(again.x_test, data.x_test)  # seeded


def test_model_sizes(tensorflow_trainings):
    """The small CNN has the seeds' 39,558 parameters; a ResNet's depth counts its layers (built on TensorFlow, in
    the process that trains the families below: a count does not depend on the backend)."""
    sizes = tensorflow_trainings["sizes"]
    assert sizes["smallcnn"] == 39558
    # 6n+2 on the main path plus the two 1x1 projection shortcuts.
    assert sizes["resnet20"] == 22 and sizes["resnet62"] == 64
    assert 270_000 < sizes["resnet20_params"] < 275_000  # He et al.: ResNet-20 has 0.27M parameters


def test_resnet_depth_must_be_6n_plus_2():
    with pytest.raises(UserError, match=r"depth must be 6n\+2"):
        load_spec("cifar10-resnet").with_overrides({"depth": "21"})


def test_precision_is_an_axis_with_keras_policies():
    spec = load_spec("mnist-cnn").with_overrides(grids={"precision": ["float32", "mixed_bfloat16"]})
    assert spec.grid["precision"] == ("float32", "mixed_bfloat16")
    with pytest.raises(UserError, match="precision must be one of float32, mixed_float16, mixed_bfloat16"):
        load_spec("mnist-cnn").with_overrides({"precision": "float16"})


# Each family's model made small for CI's two cores, in process and in the tiny searches (the CNN is small on digits).
SMALL = {
    "vgg": {"filters": 8, "dense_units": 32},
    "resnet": {"depth": 8, "filters": 8},
    "bilstm": {"vocab_size": 600, "maxlen": 40, "units": 8, "embedding_dim": 16},
    "fasttext": {"vocab_size": 600, "maxlen": 40, "embedding_dim": 16},
    "char_lstm": {"units": 16},
}
# One tiny real search per dataset; the other families' models train on TensorFlow in process instead.
SEARCHED = ("cifar10-cnn", "imdb-fasttext", "mnist-cnn", "text-lstm")
# In process, what lets a family learn the self-made data in 3 epochs of a few steps (the Keras examples' own
# rates are for 50,000 images): VGG's RMSprop at 0.0001 stayed at chance (0.05-0.2), the BiLSTM at 0.001 too
# (0.58 on two classes).
LEARNS = {
    "vgg": {"learning_rate": 0.003, "optimizer": "adam", "dropout": 0.0},
    "bilstm": {"learning_rate": 0.01},
}
# What each family's test accuracy must pass after those 3 epochs, well above chance: 0.1 on digits and the
# 10 CIFAR classes (40 test images), 0.5 on IMDb's two, 1 in 25 characters on the text. Seen on the 2-core
# machine (JAX's compiled loop, fit where run; TensorFlow's fit): cnn 0.94, vgg 0.35, resnet 0.35-0.40 (0.30 on
# TensorFlow), smallcnn 1.0, bilstm 1.0, fasttext 0.72, char_lstm 0.98.
LEARNED = {"cnn": 0.8, "vgg": 0.2, "resnet": 0.2, "smallcnn": 0.8, "bilstm": 0.8, "fasttext": 0.6, "char_lstm": 0.8}


def run_families(data_dir, backend: str, loops: dict[str, tuple[str, ...]], sizes: bool = False) -> list:
    """Each model through its loops, in a process of its own on `backend`: the JSON lines it printed, the last one
    what each trial said, by model and loop (and with `sizes`, first model_sizes.py's sizes, built in that process)."""
    datasets_of = {m: load_spec(e).dataset for e, m in FAMILY_EXPERIMENTS.items() if m in loops}
    small = {name: {**SMALL.get(name, {}), **LEARNS.get(name, {})} for name in loops}
    asked = {"backend": backend, "data_dir": str(data_dir), "datasets": datasets_of, "loops": loops, "small": small}
    out = run_python(
        str(PROGRAMS / "train_families.py"),
        json.dumps({**asked, "sizes": sizes}),
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def assert_trained(rows: dict, backend: str, loops: dict[str, tuple[str, ...]]) -> None:
    """Every model through every loop: finished on the CPU, in mixed precision, and past its LEARNED floor."""
    assert sorted(rows) == sorted(loops)
    for name, by_loop in rows.items():
        assert sorted(by_loop) == sorted(loops[name])
        for loop, (status, error, device, precision, cudnn, accuracy, epochs, used) in by_loop.items():
            assert status == "FINISHED", (name, loop, error)
            assert device == "cpu:0" and precision == "mixed_bfloat16" and epochs == 3 and used == backend
            assert cudnn == ("no" if name in ("bilstm", "char_lstm") else None)  # no cuDNN on a CPU
            assert LEARNED[name] < accuracy <= 1, (name, loop, accuracy)  # it learned, not only ran


# The families with no tiny search here, each through fit on TensorFlow (test_the_families_without_a_search_...).
UNSEARCHED = {FAMILY_EXPERIMENTS[e]: ("fit",) for e in FAMILY_EXPERIMENTS if e not in SEARCHED}


@pytest.fixture(scope="module")
def tensorflow_trainings(data_dir) -> dict:
    """One TensorFlow process for two tests: it builds model_sizes.py's models, then trains UNSEARCHED. A process of
    its own for the sizes imported Keras and a backend again (11.0 s in the suite, 2 cores)."""
    sizes, rows = run_families(data_dir, "tensorflow", UNSEARCHED, sizes=True)
    return {"sizes": sizes["sizes"], "rows": rows}


# Every family trains through fit on TensorFlow (its search, or the test below): on JAX, Keras' fit differs from
# family to family only by the model, so it runs here for one model with batch normalisation's running state and one
# with recurrent layers; gridbench's own compiled loop runs for every family.
JAX_FIT_TOO = ("resnet", "bilstm")


@pytest.mark.slow
def test_every_family_trains_on_the_compiled_loop_on_jax(data_dir, kept_environ):
    """Each family's model, on JAX, through the compiled loop (and fit, for JAX_FIT_TOO): trains, on the CPU, and
    says what it is."""
    loops = {m: ("compiled", "fit") if m in JAX_FIT_TOO else ("compiled",) for m in FAMILY_EXPERIMENTS.values()}
    (rows,) = run_families(data_dir, "jax", loops)
    assert_trained(rows, "jax", loops)  # each past its LEARNED floor
    assert sorted(rows) == sorted(LEARNED)  # every family


@pytest.mark.slow
def test_the_families_without_a_search_here_train_on_tensorflow(tensorflow_trainings):
    """TensorFlow, the CPU's default backend, trains every family: these here, the others in their searches."""
    assert UNSEARCHED  # every dataset has its search; the rest of the families train here
    assert_trained(tensorflow_trainings["rows"], "tensorflow", UNSEARCHED)


@pytest.mark.slow
@pytest.mark.parametrize("experiment", SEARCHED)
def test_a_family_of_each_dataset_runs_as_a_tiny_search(experiment, data_dir, tmp_path, mnist_dir):
    """A search through the Python API on a two-configuration grid of a family of each dataset."""
    import gridbench

    model = FAMILY_EXPERIMENTS[experiment]
    # The CNN's search reads the real MNIST: 2,000 of its 60,000 training images.
    shrink = {"filters": 8, "train_size": 2000} if model == "cnn" else SMALL[model]
    spec = load_spec(experiment)
    axis = next(a for a in spec.grid if a not in shrink)  # two configurations of an axis the shrinking leaves alone
    fixed = {other: spec.grid[other][0] for other in spec.grid if other not in (axis, *shrink)}
    store = new_store(tmp_path)
    data = str(mnist_dir) if spec.dataset == "mnist" else str(data_dir)
    # In this test process: the driver's imports (MLflow, Ray, Tune) are paid once per test worker, not per search.
    gridbench.search(
        experiment,
        params={"epochs": 2, **shrink, **fixed},
        grid={axis: list(spec.grid[axis][:2])},
        tracking_uri=store,
        data_dir=data,
    )
    from mlflow import MlflowClient

    from gridbench.tracking import experiment_name

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name(experiment)).experiment_id])
    trials = [r for r in runs if r.data.tags.get("gridbench.kind") == "trial"]
    assert len(trials) == 2
    for trial in trials:
        assert trial.info.status == "FINISHED"
        assert trial.data.tags["device.actual"] == "cpu:0" and trial.data.tags["data.synthetic"] == "false"
        assert 0 <= trial.data.metrics["test_accuracy"] <= 1 and trial.data.metrics["steady_epoch_s"] > 0
        assert int(trial.data.tags["model.params"]) > 0


@pytest.mark.slow
def test_a_synthetic_search_is_tagged_and_never_reports_accuracy(tmp_path):
    store = new_store(tmp_path)
    args = ["mnist-cnn", "--synthetic", "--tracking-uri", store, "--set", "epochs=2", "--set", "filters=4"]
    args += ["--set", "train_size=512", "--set", "learning_rate=0.001", "--set", "batch_size=128"]
    args += ["--grid", "precision=float32,mixed_bfloat16"]
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", *args], capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "synthetic mnist: random data of the real shapes; timings only, no accuracy" in result.stdout
    assert "on synthetic data (timings only)" in result.stdout and "test_accuracy" not in result.stdout
    from mlflow import MlflowClient

    from gridbench.tracking import experiment_name

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name("mnist-cnn")).experiment_id])
    parent = next(r for r in runs if r.data.tags.get("gridbench.kind") == "search")
    trials = [r for r in runs if r.data.tags.get("gridbench.kind") == "trial"]
    assert parent.data.tags["data.synthetic"] == "true" and parent.info.run_name.endswith("synthetic")
    assert "best_metric" not in parent.data.metrics
    assert sorted(t.data.tags["precision"] for t in trials) == ["float32", "mixed_bfloat16"]
    for trial in trials:
        assert trial.data.tags["data.synthetic"] == "true"
        assert not [key for key in trial.data.metrics if "accuracy" in key]
        assert trial.data.metrics["steady_epoch_s"] > 0


@pytest.mark.gpu
def test_on_a_gpu_the_lstm_runs_as_cudnn_and_the_cnn_on_the_compiled_loop(data_dir, kept_environ):
    env = {**os.environ, "KERAS_BACKEND": "jax", "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES", "0")}
    out = run_python(
        str(PROGRAMS / "gpu_lstm_and_cnn.py"), str(data_dir), capture_output=True, text=True, timeout=600, env=env
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = json.loads(out.stdout.splitlines()[-1])
    assert rows["bilstm"] == ["FINISHED", None, "gpu:0", "yes"]
    assert rows["cnn"] == ["FINISHED", None, "gpu:0", None]
