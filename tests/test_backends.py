"""Keras on each backend: the same search on TensorFlow, JAX and PyTorch, each recorded as such."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from gridbench.errors import UserError
from gridbench.search import SearchOptions, plan_search
from gridbench.spec import load_spec
from gridbench.tracking import experiment_name


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_search_on_another_backend_records_it(tmp_path, backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed (pip install -e '.[{backend}]')")
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", "digits", "--backend", backend, "--tracking-uri", store,
         "--set", "hidden_units=32", "--set", "epochs=2", "--grid", "learning_rate=0.01"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr

    from mlflow import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name("digits")).experiment_id])
    (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["backend"] == backend
    assert child.data.tags["backend"] == backend  # read back from Keras in the worker
    assert child.data.tags["device.actual"] == "cpu:0"
    assert child.data.metrics["test_accuracy"] > 0.5
    # train_loop=auto, resolved: fit on a CPU whatever the backend (the compiled loop is the GPU's).
    assert child.data.params["train_loop"] == "fit" and child.data.tags["train_loop"] == "fit"
    assert child.data.tags["compile_cache"] == parent.data.tags["compile_cache"]
    assert parent.data.tags["compile_cache"] == ("per search" if backend == "jax" else "off")
    if backend == "torch":
        assert child.data.tags["threads.torch"] == parent.data.tags["cpus_per_trial"]


def test_a_backend_that_is_not_installed_is_a_user_error(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "jax" else real_find_spec(name))
    with pytest.raises(UserError, match=r"backend jax is not installed \(pip install 'gridbench\[jax\]'\)"):
        plan_search(load_spec("digits"), SearchOptions(backend="jax"))
