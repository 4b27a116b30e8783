"""An RBF kernel ridge classifier whose arrays live on the trial's device: CuPy on a GPU, NumPy on a CPU.

One-vs-rest least squares on {-1, +1} targets (as scikit-learn's RidgeClassifier
codes them): dual coefficients A = (K + alpha I)^-1 Y with K the RBF Gram matrix,
and a prediction is the argmax of K(x, X_train) A. One code path serves both
devices through the array module `xp`.

The Gram matrix is one matrix product (cuBLAS or the CPU's BLAS) and then one pass
that turns inner products into kernel values: on the GPU a fused CuPy
ElementwiseKernel, on the CPU in-place NumPy operations, so no n x n temporary is
made either way. A Cholesky factorisation solves for one alpha; an
eigendecomposition K = Q diag(w) Q^T serves every alpha of a grid at the cost of
one small product each: A = Q diag(1 / (w + alpha)) Q^T Y.
"""

from __future__ import annotations

import functools
import time

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted

DTYPES = ("float32", "float64")
SOLVERS = ("cholesky", "eigh")


def array_module(device: str):
    """NumPy for "cpu"; CuPy for "gpu", checked with cupy.is_available() rather than by import.

    CuPy imports on a machine without a usable GPU and fails only on first use
    (cudaErrorInsufficientDriver), so importing proves nothing.
    """
    if device == "cpu":
        return np
    if device != "gpu":
        raise ValueError(f"device must be cpu or gpu, got {device!r}")
    try:
        import cupy
    except ImportError:
        raise RuntimeError("device gpu needs CuPy (pip install cupy-cuda13x, or the build for your CUDA)") from None
    if not cupy.is_available():
        raise RuntimeError("CuPy is installed but finds no usable GPU")
    return cupy


@functools.cache  # built once per process, not inside every timed Gram stage
def _rbf_kernel_gpu():
    import cupy

    # One pass over the n x m inner products: k = exp(-gamma * max(|x|^2 + |y|^2 - 2 x.y, 0)).
    return cupy.ElementwiseKernel(
        "raw T sq_x, raw T sq_y, T gamma, int64 m",
        "T g",
        "T d = sq_x[i / m] + sq_y[i % m] - 2 * g; g = exp(-gamma * (d > 0 ? d : 0));",
        "gridbench_rbf_from_inner_products",
    )


def rbf_gram(xp, x, y, gamma: float):
    """K[i, j] = exp(-gamma |x_i - y_j|^2), as one matrix product and one fused pass."""
    sq_x = (x * x).sum(axis=1)
    sq_y = (y * y).sum(axis=1)
    gram = x @ y.T
    if xp is np:
        gram *= -2
        gram += sq_x[:, None]
        gram += sq_y[None, :]
        np.maximum(gram, 0, out=gram)
        gram *= -gamma
        np.exp(gram, out=gram)
        return gram
    _rbf_kernel_gpu()(sq_x, sq_y, x.dtype.type(gamma), gram.shape[1], gram)
    return gram


def one_vs_rest_targets(xp, y_codes, n_classes: int, dtype):
    targets = -xp.ones((len(y_codes), n_classes), dtype=dtype)
    targets[xp.arange(len(y_codes)), y_codes] = 1
    return targets


class Eigensystem:
    """K = Q diag(w) Q^T, computed once; solve(alpha) for any alpha costs two products."""

    def __init__(self, xp, gram, targets):
        self.xp = xp
        self.w, self.q = xp.linalg.eigh(gram)
        self.qt_y = self.q.T @ targets

    def solve(self, alpha: float):
        return self.q @ (self.qt_y / (self.w + alpha)[:, None])


def cholesky_solve(xp, gram, targets, alpha: float):
    """(K + alpha I)^-1 Y by a Cholesky factorisation of a copy of K."""
    system = gram.copy()
    system[xp.diag_indices_from(system)] += alpha
    if xp is np:
        from scipy.linalg import cho_factor, cho_solve

        return cho_solve(cho_factor(system, lower=True, overwrite_a=True, check_finite=False), targets)
    from cupyx.scipy.linalg import solve_triangular

    lower = xp.linalg.cholesky(system)
    return solve_triangular(lower.T, solve_triangular(lower, targets, lower=True), lower=False)


class RBFKernelRidgeClassifier(ClassifierMixin, BaseEstimator):
    """Kernel ridge classification with an RBF kernel, on NumPy or CuPy arrays.

    Parameters follow sklearn.kernel_ridge.KernelRidge(kernel="rbf"): alpha, gamma.
    `device` picks the array module; `dtype` the precision of the Gram matrix and
    the solve; `solver` is "cholesky" or "eigh".
    """

    def __init__(self, alpha: float = 1.0, gamma: float = 0.1, device: str = "cpu", dtype: str = "float64",
                 solver: str = "cholesky"):  # fmt: skip
        self.alpha = alpha
        self.gamma = gamma
        self.device = device
        self.dtype = dtype
        self.solver = solver

    def fit(self, X, y):
        if self.dtype not in DTYPES or self.solver not in SOLVERS:
            raise ValueError(f"dtype must be one of {DTYPES} and solver one of {SOLVERS}")
        xp = array_module(self.device)
        self.classes_, codes = np.unique(np.asarray(y), return_inverse=True)
        self.X_fit_ = xp.asarray(X, dtype=self.dtype)
        targets = one_vs_rest_targets(xp, xp.asarray(codes), len(self.classes_), self.dtype)
        gram = rbf_gram(xp, self.X_fit_, self.X_fit_, self.gamma)
        if self.solver == "eigh":
            self.dual_coef_ = Eigensystem(xp, gram, targets).solve(self.alpha)
        else:
            self.dual_coef_ = cholesky_solve(xp, gram, targets, self.alpha)
        return self

    def decision_function(self, X):
        check_is_fitted(self, "dual_coef_")
        xp = array_module(self.device)
        return rbf_gram(xp, xp.asarray(X, dtype=self.dtype), self.X_fit_, self.gamma) @ self.dual_coef_

    def predict(self, X):
        scores = self.decision_function(X)
        codes = scores.argmax(axis=1)
        return self.classes_[codes.get() if hasattr(codes, "get") else codes]


# The workload's entry (trial.WorkloadEntry): one trial trains every alpha of a
# (gamma, train_size, dtype) group, sharing the Gram matrices and any factorisation.


def prepare(context) -> None:
    """Caps CuPy's memory pool at the trial's share of the GPU, so that packed trials fit."""
    if context.device == "gpu":
        import cupy

        cupy.get_default_memory_pool().set_limit(fraction=context.memory_fraction)


def open_session(hyperparameters, data, seed: int, device: str):
    return KernelRidgeSession(hyperparameters, data, seed, device)


# An eigendecomposition with vectors costs about 9 n^3 flops, a Cholesky solve
# n^3 / 3: eigh serves a group better from this many alphas on.
EIGH_FROM_ALPHAS = 28


def choose_solver(solver: str, alphas: int) -> str:
    if solver == "auto":
        return "eigh" if alphas >= EIGH_FROM_ALPHAS else "cholesky"
    return solver


class KernelRidgeSession:
    """One group of configurations: build (data to the device, warm-up), then every alpha."""

    def __init__(self, hyperparameters, data, seed: int, device: str):
        self.hyperparameters = dict(hyperparameters)
        self.data = data
        self.device = device
        size = int(hyperparameters["train_size"]) or len(data.x_train)
        if size > len(data.x_train):
            raise ValueError(f"train_size {size} is more than the {len(data.x_train)} training samples")
        self.train_samples = size

    def build(self) -> dict[str, float]:
        xp = self.xp = array_module(self.device)
        dtype = self.hyperparameters["dtype"]
        n = self.train_samples
        self.classes, codes = np.unique(self.data.y_train[:n], return_inverse=True)
        self.x_train = xp.asarray(self.data.x_train[:n], dtype=dtype)
        self.x_test = xp.asarray(self.data.x_test, dtype=dtype)
        self.y_test = self.data.y_test
        self.targets = one_vs_rest_targets(xp, xp.asarray(codes), len(self.classes), dtype)
        # Warm-up, kept apart: kernel compilation, BLAS/cuBLAS and solver handles.
        start = time.perf_counter()
        tiny = self.x_train[:64]
        cholesky_solve(xp, rbf_gram(xp, tiny, tiny, 0.1), self.targets[:64], 1.0)
        self.sync()
        return {"warmup_s": time.perf_counter() - start}

    def actual_device(self) -> str:
        if self.xp is np:
            return "cpu:0"
        return f"gpu:{self.x_train.device.id}"

    def sync(self) -> None:
        if self.xp is not np:
            self.xp.cuda.Device().synchronize()

    def fit_grid(self, alphas, clock) -> list[dict[str, float]]:
        """Every alpha of the group; returns per-alpha metrics (shared costs are in `shared`)."""
        xp, hp = self.xp, self.hyperparameters
        gamma = float(hp["gamma"])
        solver = choose_solver(hp["solver"], len(alphas))
        n, d = self.x_train.shape
        with clock.phase("gram"):
            gram = rbf_gram(xp, self.x_train, self.x_train, gamma)
        with clock.phase("test_gram"):
            test_gram = rbf_gram(xp, self.x_test, self.x_train, gamma)
        eigensystem = None
        if solver == "eigh":
            with clock.phase("factor"):
                eigensystem = Eigensystem(xp, gram, self.targets)
        self.shared = {
            "gram_s": clock.phases["gram"],
            "test_gram_s": clock.phases["test_gram"],
            "factor_s": clock.phases.get("factor", 0.0),
            # The Gram stage's arithmetic: the n x n x d product (2 n^2 d flops).
            "gram_tflops": 2 * n * n * d / clock.phases["gram"] / 1e12,
        }
        results = []
        for alpha in alphas:
            self.sync()
            start = time.perf_counter()
            coef = eigensystem.solve(alpha) if eigensystem else cholesky_solve(xp, gram, self.targets, alpha)
            self.sync()
            solved = time.perf_counter()
            codes = (test_gram @ coef).argmax(axis=1)
            predicted = self.classes[codes.get() if hasattr(codes, "get") else codes]
            accuracy = float(np.mean(predicted == self.y_test))
            results.append(
                {
                    "solve_s": solved - start,
                    "eval_s": time.perf_counter() - solved,
                    "test_accuracy": accuracy,
                    "ended_at": time.time(),
                }
            )
        self.solver = solver
        return results

    def facts(self) -> dict[str, str]:
        facts = {"array_module": self.xp.__name__, "solver": self.solver, "dtype": self.hyperparameters["dtype"]}
        if self.xp is not np:
            facts["version.cupy"] = self.xp.__version__
        return facts
