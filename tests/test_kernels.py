"""The RBF kernel ridge classifier against scikit-learn's KernelRidge, on NumPy here and CuPy on a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.kernel_ridge import KernelRidge
from sklearn.metrics.pairwise import rbf_kernel
from sklearn.model_selection import GridSearchCV
from stores import new_store

from gridbench.workloads import kernel_ridge
from gridbench.workloads.kernel_ridge import RBFKernelRidgeClassifier, one_vs_rest_targets, rbf_gram

# float32 Gram matrices and solves agree with float64 to about 1e-4 relative on
# well-conditioned problems (alpha >= 0.01 here); 1e-3 leaves room for harder ones.
FLOAT32_TOLERANCE = 1e-3


def problem(seed, n=300, d=20, classes=4):
    """Fresh random data each call: Gaussian blobs around random class centres."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    y = rng.integers(0, classes, size=n + 100)
    x = centres[y] + rng.normal(scale=0.8, size=(n + 100, d))
    return x[:n], y[:n], x[n:], y[n:]


def reference(x, y, alpha, gamma):
    classes, codes = np.unique(y, return_inverse=True)
    targets = one_vs_rest_targets(np, codes, len(classes), "float64")
    return KernelRidge(kernel="rbf", alpha=alpha, gamma=gamma).fit(x, targets)


def relative(a, b):
    return float(np.linalg.norm(np.asarray(a, dtype=np.float64) - b) / np.linalg.norm(b))


@pytest.mark.parametrize("solver", ["cholesky", "eigh"])
@pytest.mark.parametrize("alpha, gamma", [(0.01, 0.05), (1.0, 0.01), (0.1, 0.2)])
def test_float64_matches_kernel_ridge(solver, alpha, gamma):
    x, y, x_test, _ = problem(seed=int(alpha * 1000 + gamma * 100))
    ours = RBFKernelRidgeClassifier(alpha=alpha, gamma=gamma, dtype="float64", solver=solver).fit(x, y)
    theirs = reference(x, y, alpha, gamma)
    assert relative(ours.dual_coef_, theirs.dual_coef_) < 1e-6
    assert relative(ours.decision_function(x_test), theirs.predict(x_test)) < 1e-6


def test_float32_matches_within_its_tolerance():
    x, y, x_test, y_test = problem(seed=11)
    ours = RBFKernelRidgeClassifier(alpha=0.1, gamma=0.05, dtype="float32").fit(x, y)
    theirs = reference(x, y, 0.1, 0.05)
    assert ours.dual_coef_.dtype == np.float32
    assert relative(ours.dual_coef_, theirs.dual_coef_) < FLOAT32_TOLERANCE
    assert relative(ours.decision_function(x_test), theirs.predict(x_test)) < FLOAT32_TOLERANCE


def test_the_gram_matrix_is_sklearns_rbf_kernel():
    x, _, x_test, _ = problem(seed=3)
    assert np.allclose(rbf_gram(np, x_test, x, 0.07), rbf_kernel(x_test, x, gamma=0.07), rtol=1e-12, atol=1e-14)


def test_it_is_a_scikit_learn_classifier():
    x, y, x_test, y_test = problem(seed=5)
    model = RBFKernelRidgeClassifier(alpha=0.1, gamma=0.05)
    assert clone(model).get_params() == {"alpha": 0.1, "gamma": 0.05, "device": "cpu", "dtype": "float64",
                                         "solver": "cholesky"}  # fmt: skip
    search = GridSearchCV(model, {"alpha": [0.01, 1.0], "gamma": [0.01, 0.1]}, cv=2).fit(x, y)
    assert search.best_estimator_.score(x_test, y_test) > 0.8
    labels = np.array(["a", "b", "c", "d"])[y]  # any labels, as scikit-learn allows
    assert set(RBFKernelRidgeClassifier().fit(x, labels).predict(x_test)) <= set(labels)


def test_a_gpu_classifier_without_cupy_or_a_gpu_says_so():
    with pytest.raises(RuntimeError, match="CuPy"):
        RBFKernelRidgeClassifier(device="gpu").fit(*problem(seed=1)[:2])


def test_eigh_is_chosen_only_where_it_saves_work():
    assert kernel_ridge.choose_solver("auto", 3) == "cholesky"
    assert kernel_ridge.choose_solver("auto", kernel_ridge.EIGH_FROM_ALPHAS) == "eigh"
    assert kernel_ridge.choose_solver("eigh", 1) == "eigh"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tolerance", [("float64", 1e-6), ("float32", FLOAT32_TOLERANCE)])
@pytest.mark.parametrize("solver", ["cholesky", "eigh"])
def test_cupy_matches_kernel_ridge(dtype, tolerance, solver):
    cupy = pytest.importorskip("cupy")
    x, y, x_test, _ = problem(seed=21, n=2000, d=50)
    ours = RBFKernelRidgeClassifier(alpha=0.1, gamma=0.02, device="gpu", dtype=dtype, solver=solver).fit(x, y)
    assert isinstance(ours.dual_coef_, cupy.ndarray)
    theirs = reference(x, y, 0.1, 0.02)
    assert relative(ours.dual_coef_.get(), theirs.dual_coef_) < tolerance
    assert relative(ours.decision_function(x_test).get(), theirs.predict(x_test)) < tolerance
    assert np.allclose(rbf_gram(cupy, cupy.asarray(x_test), cupy.asarray(x), 0.02).get(),
                       rbf_kernel(x_test, x, gamma=0.02), rtol=1e-10, atol=1e-12)  # fmt: skip


@pytest.mark.slow
def test_a_kernel_search_shares_each_gram_matrix_among_its_alphas_and_says_so(tmp_path):
    from test_search import runs_of

    import gridbench

    store = new_store(tmp_path)
    gridbench.search("kernels-digits", tracking_uri=store, cpus_per_trial=1)  # in this process, as test_backends
    _, (parent,), children = runs_of(store, "kernels-digits")
    assert parent.data.tags["timing.train"] == "fit_s" and parent.data.tags["backend"] == "numpy/cupy"
    assert len(children) == 12 and all(c.info.status == "FINISHED" for c in children)
    by_gamma: dict[str, list] = {}
    for child in children:
        by_gamma.setdefault(child.data.params["gamma"], []).append(child)
    assert sorted(by_gamma) == ["0.03", "0.1", "0.3"]
    for group in by_gamma.values():
        assert sorted(c.data.params["alpha"] for c in group) == ["0.001", "0.01", "0.1", "1.0"]
        gram = {c.data.metrics["gram_s"] for c in group}
        assert len(gram) == 1  # computed once, the same figure on every configuration that shared it
        for child in group:
            m = child.data.metrics
            assert m["shared_by"] == 4 and child.data.tags["shared_by"] == "4"
            assert m["fit_s"] == pytest.approx(m["solve_s"] + (m["gram_s"] + m["factor_s"]) / 4)
            # Its own solve and evaluation and an equal part of what the group shared: never below its fit time.
            shared = m["group_wall_s"] - sum(c.data.metrics["solve_s"] + c.data.metrics["eval_s"] for c in group)
            assert m["trial_wall_s"] == pytest.approx(m["solve_s"] + m["eval_s"] + shared / 4)
            assert m["trial_wall_s"] >= m["fit_s"]
            assert child.data.tags["device.actual"] == "cpu:0" and child.data.tags["array_module"] == "numpy"
            assert m["test_accuracy"] > 0.9


@pytest.mark.slow
def test_the_scikit_learn_baselines_are_recorded_as_searches_that_compare_pairs(tmp_path):
    import json
    import subprocess
    import sys

    from test_search import runs_of

    store = new_store(tmp_path)

    def gridbench(*args):
        return subprocess.run([sys.executable, "-m", "gridbench", *args, "--tracking-uri", store],
                              capture_output=True, text=True, timeout=600, cwd=tmp_path)  # fmt: skip

    for estimator in ("svc", "kernel_ridge"):
        done = gridbench("baseline", "kernels-digits", "--estimator", estimator, "--n-jobs", "1")
        assert done.returncode == 0, done.stderr
    _, parents, children = runs_of(store, "kernels-digits")
    by_backend = {p.data.tags["backend"]: p for p in parents}
    assert set(by_backend) == {"scikit-learn svc", "scikit-learn kernel_ridge"}
    assert len(children) == 24 and all(c.data.metrics["fit_s"] > 0 for c in children)
    svc = [c for c in children if c.data.tags["mlflow.parentRunId"] == by_backend["scikit-learn svc"].info.run_id]
    assert {(c.data.params["alpha"], c.data.tags["C"]) for c in svc} >= {("0.001", "1000"), ("1.0", "1")}

    ids = [by_backend["scikit-learn svc"].info.run_id, by_backend["scikit-learn kernel_ridge"].info.run_id]
    from in_process import gridbench_main

    code, _, err = gridbench_main("compare", *ids, "--tracking-uri", store, cwd=tmp_path)
    assert code == 2 and "backend: scikit-learn svc" in err
    allowed = gridbench("compare", *ids, "--allow-mismatch", "--format", "json")
    assert allowed.returncode == 0, allowed.stderr
    (pairing,) = json.loads(allowed.stdout)["pairings"]
    assert len(pairing["configurations"]) == 12  # every configuration paired by its grid point
