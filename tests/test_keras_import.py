"""A trial's worker imports Keras without scikit-learn, matplotlib and pandas, which only Keras' wrappers, image
galleries and DataFrame slicing use (trial.keras_import)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gridbench.trial import keras_import
from gridbench.workloads import get_workload

PROGRAM = Path(__file__).parent / "programs" / "keras_without_sklearn.py"


def _found(*args: str) -> dict:
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    result = subprocess.run([sys.executable, str(PROGRAM), *args], capture_output=True, text=True, env=env, timeout=300)
    line = next((x for x in result.stdout.splitlines() if x.startswith("FOUND ")), "")
    assert line, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(line[len("FOUND ") :])


@pytest.mark.slow
def test_keras_is_imported_without_sklearn_which_imports_as_usual_afterwards():
    found = _found()
    assert found["hidden"] == ["sklearn", "matplotlib", "pandas"]
    assert not (found["sklearn_after_keras"] or found["matplotlib_after_keras"] or found["pandas_after_keras"])
    assert found["keras_works"] is True
    assert found["sklearn_later"] == "sklearn.base" and found["pyplot_later"] == "matplotlib.pyplot"
    assert found["wrapper"].startswith("ImportError") and "scikit-learn" in found["wrapper"]  # the two things lost
    assert found["gallery"].startswith("ImportError") and "matplotlib" in found["gallery"]
    assert found["pandas_later"] == "pandas" and found["frame_fitted"] is True  # a DataFrame fits as an array


@pytest.mark.slow
def test_where_sklearn_was_imported_first_keras_keeps_its_wrappers():
    found = _found("sklearn-first")
    assert found["hidden"] == ["matplotlib"]  # scikit-learn imports pandas (sklearn.utils.fixes)
    assert found["keras_works"] is True and found["wrapper"] == "works"


def test_a_kernel_method_imports_no_keras(monkeypatch):
    monkeypatch.setattr(keras_import, "import_keras", lambda: pytest.fail("Keras imported for a kernel method"))
    assert keras_import.import_for(get_workload("kernel_ridge", "test")) == ()


@pytest.mark.slow
def test_a_jax_trial_seeds_keras_as_keras_does_without_importing_tensorflow():
    pytest.importorskip("tensorflow")  # installed as the README says (tensorflow-cpu): Keras would import it

    def seeded(*args: str) -> dict:
        program = Path(__file__).parent / "programs" / "keras_seed.py"
        result = subprocess.run([sys.executable, str(program), *args], capture_output=True, text=True, timeout=300)
        line = next((x for x in result.stdout.splitlines() if x.startswith("FOUND ")), "")
        assert line, result.stdout[-3000:] + result.stderr[-3000:]
        return json.loads(line[len("FOUND ") :])

    ours, keras_own = seeded(), seeded("keras")
    assert keras_own["tensorflow_imported"] is True  # Keras' own seeding imports TensorFlow to seed it too
    assert ours["tensorflow_imported"] is False
    assert ours["weights"] == keras_own["weights"] and ours["numpy_draw"] == keras_own["numpy_draw"]
    assert ours["tensorflow_found_later"] is True  # a layer that needs TensorFlow later still finds it
