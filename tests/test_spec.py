"""Experiment specs: loading, grid expansion, overrides, and every error a user can make."""

from __future__ import annotations

import re

import pytest

from gridbench.errors import UserError
from gridbench.spec import load_spec, parse_assignments, parse_grid_overrides


def write(tmp_path, text: str, name: str = "exp.toml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


MINIMAL = """
dataset = "digits"
model = "mlp"
[params]
epochs = 3
[grid]
hidden_units = [16, 32]
learning_rate = [0.1, 0.01, 0.001]
"""


def test_shipped_experiments_load_with_the_promised_grids():
    digits = load_spec("digits")
    assert digits.dataset == "digits" and digits.model == "mlp"
    assert digits.grid_size >= 4
    mnist = load_spec("mnist")
    assert mnist.dataset == "mnist"
    assert mnist.grid_size >= 8
    assert set(mnist.grid) == {"hidden_units", "learning_rate", "batch_size"}


def test_grid_expands_in_sorted_axis_order_with_every_combination(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    configs = spec.configurations()
    assert spec.grid_size == len(configs) == 6
    assert configs[0] == {"hidden_units": 16, "learning_rate": 0.1}
    assert configs[1] == {"hidden_units": 16, "learning_rate": 0.01}
    assert configs[-1] == {"hidden_units": 32, "learning_rate": 0.001}
    assert len({tuple(c.items()) for c in configs}) == 6


def test_defaults_fill_unset_hyperparameters_and_the_spec_is_immutable(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.params["epochs"] == 3
    assert spec.params["batch_size"] == 128  # the workload's default
    assert "hidden_units" not in spec.params  # it is an axis
    assert spec.metric == "test_accuracy" and spec.mode == "max" and spec.repeats == 1
    with pytest.raises(TypeError):
        spec.params["epochs"] = 4
    with pytest.raises(AttributeError):
        spec.repeats = 2


def test_set_fixes_a_value_and_removes_its_axis(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL)).with_overrides({"hidden_units": "64", "dropout": "0.5"})
    assert spec.params["hidden_units"] == 64 and spec.params["dropout"] == 0.5
    assert "hidden_units" not in spec.grid
    assert spec.grid_size == 3


def test_grid_replaces_or_adds_an_axis(tmp_path):
    spec = load_spec(write(tmp_path, MINIMAL)).with_overrides(
        grids={"learning_rate": ["0.5"], "batch_size": ["8", "16"]}
    )
    assert spec.grid["learning_rate"] == (0.5,)
    assert spec.grid["batch_size"] == (8, 16)
    assert "batch_size" not in spec.params
    assert spec.grid_size == 2 * 1 * 2


def test_spec_hash_changes_with_content_not_with_location(tmp_path):
    a = load_spec(write(tmp_path, MINIMAL, "a.toml"))
    b = load_spec(write(tmp_path, MINIMAL, "b.toml"))
    assert a.spec_hash != b.spec_hash  # the name is part of the spec
    (tmp_path / "elsewhere").mkdir()
    assert a.spec_hash == load_spec(write(tmp_path / "elsewhere", MINIMAL, "a.toml")).spec_hash
    assert a.spec_hash != a.with_overrides({"epochs": "4"}).spec_hash
    assert a.spec_hash == a.with_overrides({"epochs": "3"}).spec_hash


def test_repeats_override(tmp_path):
    assert load_spec(write(tmp_path, MINIMAL)).with_repeats(3).repeats == 3


def test_command_line_assignments_parse():
    assert parse_assignments(["a=1", "b = x", "a=2"], "--set") == {"a": "2", "b": "x"}
    assert parse_grid_overrides(["lr=0.1, 0.01"]) == {"lr": ["0.1", "0.01"]}
    assert parse_grid_overrides(["lr="]) == {"lr": []}


@pytest.mark.parametrize(
    "text, message",
    [
        ('dataset = "digits"\nmodel = "mlp"\n[grid]\nwidth = [1]\n', "unknown hyperparameter 'width'"),
        ('dataset = "digits"\nmodel = "mlp"\n[grid]\nhidden_units = []\n', "grid axis 'hidden_units' is empty"),
        (
            'dataset = "digits"\nmodel = "mlp"\n[params]\nlearning_rate = 0\n',
            "learning_rate must be > 0 and <= 10, got 0",
        ),
        (
            'dataset = "digits"\nmodel = "mlp"\n[grid]\nlearning_rate = [0.1, -1]\n',
            "learning_rate must be > 0 and <= 10, got -1",
        ),
        ('dataset = "digits"\nmodel = "mlp"\n[params]\nbatch_size = 0\n', "batch_size must be in [1, 1048576], got 0"),
        ('dataset = "digits"\nmodel = "mlp"\n[params]\nepochs = 0\n', "epochs must be in [2, 10000]"),
        ('dataset = "digits"\nmodel = "mlp"\nrepeats = 0\n', "repeats must be an integer > 0, got 0"),
        (
            'dataset = "digits"\nmodel = "mlp"\n[params]\nbatch_size = "big"\n',
            "batch_size must be an integer, got 'big'",
        ),
        (
            'dataset = "digits"\nmodel = "mlp"\n[params]\noptimizer = "adamw"\n',
            "optimizer must be one of adam, rmsprop, sgd",
        ),
        (
            'dataset = "digits"\nmodel = "mlp"\n[params]\nepochs = 3\n[grid]\nepochs = [2]\n',
            "in both [params] and [grid]",
        ),
        ('dataset = "digits"\nmodel = "rnn"\n', "unknown model 'rnn'; known: mlp, cnn"),
        (
            'dataset = "cifar"\nmodel = "mlp"\n',
            "dataset 'cifar' is not available for model 'mlp'; choose one of digits, mnist",
        ),
        ('model = "mlp"\n', 'dataset = "..." is required'),
        ('dataset = "digits"\nmodel = "mlp"\nepochs = 3\n', "unknown key(s) epochs"),
        ('dataset = "digits"\nmodel = "mlp"\nmetric = "f1"\n', "unknown metric 'f1'"),
    ],
)
def test_invalid_specs_are_refused_with_the_fix(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as caught:
        load_spec(path)
    assert message in str(caught.value)
    assert path in str(caught.value)  # says which file


def test_toml_syntax_error_names_file_and_line(tmp_path):
    path = write(tmp_path, 'dataset = "digits"\nmodel = "mlp"\n[grid\nhidden_units = [1]\n')
    with pytest.raises(UserError, match=r"invalid TOML: .*line 3"):
        load_spec(path)


def test_unknown_experiment_lists_the_known_ones():
    with pytest.raises(UserError) as caught:
        load_spec("nope")
    assert "unknown experiment 'nope'" in str(caught.value)
    assert "digits" in str(caught.value) and "mnist" in str(caught.value)


def test_missing_experiment_file():
    with pytest.raises(UserError, match="does not exist"):
        load_spec("no/such/file.toml")


@pytest.mark.parametrize(
    "sets, grids, message",
    [
        ({"width": "3"}, {}, "--set: unknown hyperparameter 'width'"),
        ({}, {"width": ["3"]}, "--grid: unknown hyperparameter 'width'"),
        ({"learning_rate": "-0.1"}, {}, "learning_rate must be > 0"),
        ({"batch_size": "0"}, {}, "batch_size must be in [1, 1048576]"),
        ({"epochs": "-1"}, {}, "epochs must be in [2, 10000]"),
        ({"epochs": "two"}, {}, "epochs must be an integer, got 'two'"),
        ({}, {"learning_rate": []}, "grid axis 'learning_rate' is empty"),
        ({}, {"batch_size": ["64", "0"]}, "batch_size must be in [1, 1048576], got 0"),
    ],
)
def test_overrides_are_validated_like_the_file(sets, grids, message):
    with pytest.raises(UserError, match=re.escape(message)):
        load_spec("digits").with_overrides(sets, grids)


def test_repeats_must_be_positive():
    with pytest.raises(UserError, match="repeats must be an integer > 0"):
        load_spec("digits").with_repeats(0)


def test_malformed_assignment():
    with pytest.raises(UserError, match="expected KEY=VALUE"):
        parse_assignments(["learning_rate"], "--set")


@pytest.mark.parametrize(
    "backend, device, loop",
    [("jax", "gpu", "compiled"), ("jax", "cpu", "fit"), ("tensorflow", "gpu", "fit"), ("torch", "gpu", "fit")],
)
def test_the_auto_train_loop_is_resolved_for_the_backend_and_device(backend, device, loop):
    spec = load_spec("digits")
    assert spec.params["train_loop"] == "auto"
    resolved = spec.for_backend(backend, device)
    assert resolved.params["train_loop"] == loop
    assert resolved.spec_hash != spec.spec_hash  # records say which loop ran


def test_both_loops_can_be_a_grid_axis_on_jax():
    spec = load_spec("digits").with_overrides(grids={"train_loop": ["fit", "compiled"]}).for_backend("jax", "cpu")
    assert spec.grid["train_loop"] == ("fit", "compiled") and spec.grid_size == 8


def test_the_compiled_loop_needs_jax():
    with pytest.raises(UserError, match="train_loop=compiled needs --backend jax .*; on torch use train_loop=fit"):
        load_spec("digits").with_overrides({"train_loop": "compiled"}).for_backend("torch", "gpu")


def test_auto_beside_the_loop_it_resolves_to_is_refused():
    spec = load_spec("digits").with_overrides(grids={"train_loop": ["auto", "compiled"]})
    with pytest.raises(UserError, match="names the same loop twice on jax"):
        spec.for_backend("jax", "gpu")
