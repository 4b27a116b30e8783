"""A user's own model and data, from a TOML or from Python: the example end to end, and every bad input.

Most bad inputs fail before Ray starts: the spec's checks in-process, the model's and
data's checks in gridbench.workloads.user_probe (called here in-process, as its
subprocess would). A few go through the command line to show the one line and exit 2.
One Ray search runs the shipped example through the Python API.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from stores import new_store
from trainings import PROGRAMS

import gridbench
from gridbench.datasets import user_data
from gridbench.errors import UserError
from gridbench.spec import load_spec

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "examples" / "digits-cnn.toml"

SPEC = """
model = "{model}"
dataset = "{dataset}"
[hyperparameters.units]
type = "int"
default = 8
min = 1
[params]
epochs = 2
batch_size = 8
[grid]
units = [4, 8]
"""


def arrays(**changes):
    rng = np.random.default_rng(0)
    data = {
        "x_train": rng.random((30, 4), dtype=np.float32),
        "y_train": np.arange(30) % 3,
        "x_test": rng.random((9, 4), dtype=np.float32),
        "y_test": np.arange(9) % 3,
    }
    data.update(changes)
    return {k: v for k, v in data.items() if v is not None}


@pytest.fixture
def folder(tmp_path):
    """A folder holding a user's module (my_models.py), data (data.npz) and a spec writer."""
    shutil.copy(PROGRAMS / "user_models.py", tmp_path / "my_models.py")
    np.savez(tmp_path / "data.npz", **arrays())

    def write(model="my_models:build", dataset="data.npz", text=SPEC, **extra) -> str:
        path = tmp_path / "exp.toml"
        path.write_text(text.format(model=model, dataset=dataset, **extra))
        return str(path)

    write.dir = tmp_path
    return write


# --- the spec: declared hyperparameters, checked as the built-in ones are ---


def test_declared_hyperparameters_are_used_in_params_and_grid_and_recorded_in_the_hash(folder):
    spec = load_spec(folder())
    assert spec.grid["units"] == (4, 8) and spec.params["epochs"] == 2
    assert spec.workload.hyperparameter("units", "t").default == 8
    assert spec.to_dict()["hyperparameters"] == {"units": {"type": "int", "default": 8, "min": 1}}
    wider = load_spec(folder(text=SPEC.replace("min = 1", "min = 2")))
    assert wider.spec_hash != spec.spec_hash
    assert spec.with_overrides({"units": "16"}).params["units"] == 16


@pytest.mark.parametrize(
    "text, message",
    [
        (SPEC.replace("units = [4, 8]", 'units = [4, "wide"]'), "units must be an integer, got 'wide'"),
        (SPEC.replace("default = 8", "default = 0"), "[hyperparameters.units] default: units must be >= 1, got 0"),
        (SPEC.replace("[hyperparameters.units]", "[hyperparameters.epochs]"), "'epochs' is a name gridbench owns"),
        (SPEC.replace("[hyperparameters.units]", "[hyperparameters.dropout]"), "'dropout' is a name gridbench owns"),
        (SPEC + "[hyperparameters.units]\ntype = 'int'\ndefault = 2\n", "invalid TOML"),  # declared twice
        (SPEC.replace('type = "int"', 'type = "integer"'), 'needs type = "int", "float" or "str"'),
        (SPEC.replace("min = 1", "min = 1\nstep = 2"), "unknown key(s) step"),
        (SPEC.replace('model = "{model}"', 'model = "my_models"'), "unknown model 'my_models'"),
        (SPEC.replace('model = "{model}"', 'model = "my models:build"'), 'must be "package.module:function"'),
    ],
)
def test_bad_declarations_and_values_are_one_user_error(folder, text, message):
    with pytest.raises(UserError) as err:
        load_spec(folder(text=text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_built_in_model_refuses_declared_hyperparameters(folder):
    with pytest.raises(UserError, match=r"\[hyperparameters\] declares your own model's"):
        load_spec(folder(model="mlp", dataset="digits"))


def test_python_spec_takes_the_function_and_the_arrays(folder):
    def build(hp):
        raise AssertionError("not called while planning a spec")

    spec = gridbench.Spec(
        model=build,
        dataset=tuple(arrays().values()),
        hyperparameters={"units": {"type": int, "default": 8, "min": 1}},
        grid={"units": [np.int64(4), 8]},
    ).to_experiment()
    assert spec.grid["units"] == (4, 8)
    assert spec.user_data.kind == "arrays" and spec.dataset.startswith("arrays ")
    assert spec.workload.model_builder is build
    with pytest.raises(UserError, match="units must be an integer, got 'x'"):
        spec.with_overrides({"units": "x"})


# --- the data's checks (driver side) ---


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"y_test": None}, "lack(s) y_test"),
        ({"y_train": np.arange(29) % 3}, "x_train has 30 samples but y_train 29 labels"),
        ({"y_train": (np.arange(30) % 3).astype(np.float32)}, "y_train must be integer class labels"),
        ({"y_train": np.eye(3, dtype=np.int64)[np.arange(30) % 3]}, "labels.argmax(axis=1)"),
        ({"y_test": np.array([0, 1, 2, 3, 0, 1, 2, 0, 1])}, "y_test holds label 3, out of range"),
        ({"y_train": np.arange(30) % 3 - 1}, "y_train holds label -1, out of range"),
        ({"x_test": np.full((9, 4), np.nan, np.float32)}, "x_test holds 36 NaN or infinite value(s)"),
        ({"x_train": np.full((30, 4), np.inf, np.float32)}, "x_train holds 120 NaN or infinite value(s)"),
        ({"x_test": np.zeros((9, 5), np.float32)}, "x_train's samples are (4,) but x_test's (5,)"),
    ],
)
def test_each_data_check_names_what_is_wrong(tmp_path, changes, message):
    np.savez(tmp_path / "bad.npz", **arrays(**changes))
    source = user_data.user_data("bad.npz", "t", str(tmp_path))
    with pytest.raises(UserError) as err:
        user_data.inspect(user_data.load_arrays(source), "t")
    assert message in str(err.value)


def test_an_unreadable_dataset_file_is_a_user_error(tmp_path):
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(UserError, match=r"junk.npz cannot be read .*numpy.savez"):
        user_data.load_arrays(user_data.user_data("junk.npz", "t", str(tmp_path)))


def test_good_data_reads_as_a_trial_reads_it(tmp_path):
    np.savez(tmp_path / "ok.npz", **arrays())
    source = user_data.user_data("ok.npz", "t", str(tmp_path))
    facts = user_data.inspect(user_data.load_arrays(source), "t")
    assert (facts.train, facts.test, facts.sample_shape, facts.num_classes) == (30, 9, (4,), 3)
    data = user_data.read(source)
    assert data.x_train.dtype == np.float32 and data.num_classes == 3 and len(data.y_test) == 9


def test_the_training_set_beyond_the_trials_memory_share_is_refused_as_an_estimate(folder, monkeypatch):
    from gridbench.gridsearch import SearchOptions, user_check
    from gridbench.gridsearch.plan import SearchPlan

    spec = load_spec(folder())
    facts = user_data.DataFacts(train=30, test=9, sample_shape=(4,), num_classes=3, train_bytes=480)
    plan = SearchPlan(
        spec,
        SearchOptions(),
        "sqlite:///x.db",
        data=None,
        backend_choice=None,
        cpus_per_trial=1,
        gpus_per_trial=0.0,
        gpus=0,
        cpus=1,
        trials_total=2,
    )
    monkeypatch.setattr(user_check, "memory_share", lambda plan: (479, "GPU memory"))
    with pytest.raises(UserError, match=r"needs about 0.00 GiB .*estimated.*share of GPU memory.*\(estimated\)"):
        user_check._check_sizes(plan, facts)
    monkeypatch.setattr(user_check, "memory_share", lambda plan: (480, "GPU memory"))
    user_check._check_sizes(plan, facts)  # fits: no error


# --- the model's checks (the probe, in-process) ---


def probe(folder, model: str, dataset="data.npz"):
    from gridbench.workloads import user_probe

    spec = load_spec(folder(model=model, dataset=dataset))
    return user_probe._check(
        {
            "reference": spec.user_model.reference,
            "model_builder": spec.workload.model_builder,
            "declared": ["units"],
            "configs": [{**spec.params, "units": 4}],
            "data": spec.user_data,
        }
    )


@pytest.mark.parametrize(
    "model, message",
    [
        ("no_such_module:build", "cannot import no_such_module"),
        ("my_models:missing", "my_models has no attribute 'missing'"),
        ("my_models:NOT_CALLABLE", "NOT_CALLABLE is a int, not a function"),
        ("my_models:raises", "raised ValueError at units=4: no such layer size"),
        ("my_models:not_a_model", "returned a str at units=4, not a keras.Model"),
        ("my_models:four_units", "outputs [4] per sample at units=4, but the labels name 3 classes"),
        ("my_models:logits", "not class probabilities"),
    ],
)
def test_each_bad_model_is_one_user_error(folder, model, message):
    with pytest.raises(UserError) as err:
        probe(folder, model)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_good_model_and_loader_pass_the_probe_with_the_datas_facts(folder):
    result = probe(folder, "my_models:build")
    assert result["facts"]["num_classes"] == 3 and result["parameters"] == 4 * 4 + 4 + 4 * 3 + 3


# --- the command line and the Python API's surface ---


def gridbench_cli(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gridbench", *args], capture_output=True, text=True, timeout=300, cwd=cwd
    )


@pytest.mark.parametrize(
    "model, dataset, message",
    [
        ("my_models:four_units", "data.npz", "but the labels name 3 classes"),
        ("my_models:build", "missing.npz", "missing.npz does not exist"),
    ],
)
def test_the_command_line_gives_one_line_exit_2_and_writes_nothing(folder, model, dataset, message):
    spec = folder(model=model, dataset=dataset)
    store = folder.dir / "store" / "mlflow.db"
    store.parent.mkdir()
    result = gridbench_cli("search", spec, "--tracking-uri", f"sqlite:///{store}", cwd=folder.dir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("gridbench: error: ")
    assert message in result.stderr
    assert not store.exists()


def test_list_shows_a_user_experiments_hyperparameters(tmp_path, monkeypatch, capsys):
    from gridbench import cli, spec

    (tmp_path / "mine.toml").write_text(SPEC.format(model="my_models:build", dataset="data.npz"))
    monkeypatch.setattr(spec, "EXPERIMENTS_DIR", tmp_path)
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "mine" in out and "my_models:build: your model my_models:build;" in out
    assert out.rstrip().endswith("train_size, units")


def test_the_api_is_light_to_import_and_search_and_compare_stay_callable():
    result = subprocess.run([sys.executable, PROGRAMS / "light_api.py"], capture_output=True, text=True, timeout=120)
    assert "ERR search() takes an experiment's name" in result.stdout, result.stderr


def test_search_refuses_an_unknown_option_before_anything_runs():
    with pytest.raises(UserError, match="unknown option.* tracking_url; known: backend"):
        gridbench.search(str(EXAMPLE), tracking_url="sqlite:///x.db")


def test_the_api_names_its_own_arguments_in_errors_not_the_command_lines_flags():
    with pytest.raises(UserError) as raised:
        gridbench.search("digits", device="gpu", gpus_per_trial=1.5)
    assert str(raised.value).startswith("gpus_per_trial=1.5: above 1") and "--" not in str(raised.value)
    assert importlib.import_module("gridbench.api").python_terms(
        "--set 'x': expected KEY=VALUE, e.g. --set learning_rate=0.01"
    ) == ("params 'x': expected KEY=VALUE, e.g. params={'learning_rate': '0.01'}")
    assert importlib.import_module("gridbench.api").python_terms(
        "--device gpu: no GPU is visible; use --device cpu"
    ) == ("device='gpu': no GPU is visible; use device='cpu'")


def test_the_api_and_the_command_line_check_a_users_model_while_ray_starts(monkeypatch, tmp_path):
    import threading
    import time

    import gridbench.gridsearch as gridsearch
    from gridbench.gridsearch import plan as planning
    from gridbench.gridsearch import ray_session

    spans = {}

    def timed(name, result=None):
        def call(*args, **kwargs):
            start = time.monotonic()
            time.sleep(1.0)
            spans[name] = (start, time.monotonic(), threading.current_thread().name)
            return result

        return call

    monkeypatch.setattr(planning.user_check, "check", timed("check", 1.0))
    monkeypatch.setattr(ray_session.RaySession, "start", timed("ray"))
    monkeypatch.setattr(ray_session.RaySession, "stop", lambda self: None)
    monkeypatch.setattr(gridsearch, "run_search", lambda plan, **kwargs: plan)  # the plan, not a search
    monkeypatch.setattr(importlib.import_module("gridbench.api"), "Search", lambda result: result)
    plan = gridbench.search(str(EXAMPLE), tracking_uri=f"sqlite:///{tmp_path}/mlflow.db")
    assert plan.user_check_s == 1.0
    (check_start, check_end, _), (ray_start, ray_end, _) = spans["check"], spans["ray"]
    assert check_start < ray_end and ray_start < check_end  # the two overlapped

    # The command line, likewise: planning ends in run_search, stopped here.
    from gridbench import cli

    class Planned(Exception):
        pass

    def planned(plan, **kwargs):
        raise Planned

    spans.clear()
    monkeypatch.setattr(gridsearch, "run_search", planned)
    with pytest.raises(Planned):
        cli.main(["search", str(EXAMPLE), "--tracking-uri", f"sqlite:///{tmp_path}/cli.db"])  # a store of its own
    (check_start, check_end, _), (ray_start, ray_end, _) = spans["check"], spans["ray"]
    assert check_start < ray_end and ray_start < check_end


# --- one real search: the shipped example through the Python API ---


@pytest.mark.slow
def test_the_example_runs_through_the_api_and_to_pandas_matches_the_store(tmp_path):
    from gridbench.tracking import read_search

    # The example's module is in examples/, on no worker's path: Ray's runtime_env uploads it.
    assert str(EXAMPLE.parent) not in os.environ.get("PYTHONPATH", "") and str(EXAMPLE.parent) not in sys.path
    store = new_store(tmp_path)
    result = gridbench.search(
        str(EXAMPLE), params={"epochs": 2, "filters": 8}, grid={"learning_rate": [0.003, 0.01]}, tracking_uri=store
    )
    frame = result.to_pandas()
    stored = read_search(store, result.run_id)
    assert len(frame) == len(stored.trials) == 2
    assert set(frame["status"]) == {"FINISHED"} and set(frame["device"]) == {"cpu:0"}
    by_rate = {float(t.config["learning_rate"]): t for t in stored.trials}
    for _, row in frame.iterrows():
        trial = by_rate[row["learning_rate"]]
        assert row["test_accuracy"] == pytest.approx(trial.metrics["test_accuracy"])
        assert row["steady_epoch_s"] == pytest.approx(trial.metrics["steady_epoch_s"])
        assert row["test_accuracy"] > 0.5  # real digits, learnt
    assert result.summary["trials_finished"] == 2 == stored.metrics["trials_finished"]
    assert stored.tags["model"] == "digits_cnn:build" and stored.params["filters"] == "8"
