"""The baseline a user would pick instead of gridbench: scikit-learn's GridSearchCV on the CPU.

    spec (kernel_ridge) -> GridSearchCV(SVC or KernelRidge) per training-set size -> MLflow, as a search

The same grid, data and split as gridbench's kernel searches: each configuration is
fitted once on the training set and scored on the test set (a PredefinedSplit, no
refit), so `gridbench compare` pairs its configurations with a gridbench search's
(`--allow-mismatch`, since the backends differ). SVC has no alpha: C = 1 / alpha,
the usual correspondence of a penalty and an inverse regularisation strength.
"""

from __future__ import annotations

import os
import time
from typing import Iterator

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from gridbench import environment
from gridbench.datasets import find, trial_data
from gridbench.errors import UserError
from gridbench.gridsearch.recording import search_params, spec_tags
from gridbench.spec import ExperimentSpec
from gridbench.tracking import schema
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus, TrialStatus
from gridbench.tracking.store import MlflowRecorder, check_tracking_uri, resolve_tracking_uri
from gridbench.workloads.kernel_ridge import one_vs_rest_targets

ESTIMATORS = ("svc", "kernel_ridge")


class SklearnKernelRidgeClassifier(ClassifierMixin, BaseEstimator):
    """scikit-learn's KernelRidge(kernel="rbf") on one-vs-rest {-1, +1} targets, predicting the argmax."""

    def __init__(self, alpha: float = 1.0, gamma: float = 0.1):
        self.alpha = alpha
        self.gamma = gamma

    def fit(self, X, y):
        from sklearn.kernel_ridge import KernelRidge

        self.classes_, codes = np.unique(y, return_inverse=True)
        targets = one_vs_rest_targets(np, codes, len(self.classes_), "float64")
        self.model_ = KernelRidge(kernel="rbf", alpha=self.alpha, gamma=self.gamma).fit(X, targets)
        return self

    def predict(self, X):
        return self.classes_[self.model_.predict(X).argmax(axis=1)]


def _grid(spec: ExperimentSpec, name: str) -> tuple[list[int], dict[str, list]]:
    def values(axis):
        return list(spec.grid[axis]) if axis in spec.grid else [spec.params[axis]]

    alphas, gammas = values("alpha"), values("gamma")
    if name == "svc":
        return values("train_size"), {"C": [1 / a for a in alphas], "gamma": gammas}
    return values("train_size"), {"alpha": alphas, "gamma": gammas}


def run_baseline(spec: ExperimentSpec, name: str, tracking_uri: str | None, data_dir: str | None, n_jobs: int):
    """Runs the grid through GridSearchCV and records it; returns (parent run id, summary)."""
    if spec.model != "kernel_ridge":
        raise UserError(f"baselines exist for kernel_ridge experiments (kernels-*), not model {spec.model!r}")
    if name not in ESTIMATORS:
        raise UserError(f"--estimator must be one of {', '.join(ESTIMATORS)}, got {name!r}")
    if n_jobs == 0:
        raise UserError("--n-jobs must not be 0 (scikit-learn: a positive count, or -1 for every core)")
    uri = resolve_tracking_uri(tracking_uri)
    check_tracking_uri(uri)
    source = find.locate(spec.dataset, data_dir)

    from sklearn.model_selection import GridSearchCV, PredefinedSplit
    from sklearn.svm import SVC

    env = environment.collect()
    recorder = MlflowRecorder(uri, spec.name)
    recorder.start(
        run_name=f"{spec.name} cpu scikit-learn {name}",
        params={**search_params(spec), schema.PARAM_REPEATS: 1},
        tags={
            **env,
            **spec_tags(spec, source.description, synthetic=False),
            schema.DEVICE: "cpu",
            schema.BACKEND: f"scikit-learn {name}",
            schema.CPUS_PER_TRIAL: str(environment.usable_cores()),
            schema.GPUS_PER_TRIAL: "0",
            schema.GPUS_USED: "0",
            schema.KIND: "search",
            schema.BASELINE: f"GridSearchCV({name}), n_jobs={n_jobs}",
        },
        documents={"spec.json": spec.to_dict(), "environment.json": env},
    )
    status, error, summary = SearchStatus.FAILED, None, None
    trials: list[TrialRecord] = []
    try:
        data = trial_data.load(source, seed=spec.seed)
        sizes, param_grid = _grid(spec, name)
        started = time.perf_counter()
        for size in sizes:
            n = int(size) or len(data.x_train)
            x = np.concatenate([data.x_train[:n], data.x_test])
            y = np.concatenate([data.y_train[:n], data.y_test])
            split = PredefinedSplit(np.r_[np.full(n, -1), np.zeros(len(data.x_test), dtype=int)])
            estimator = SVC(kernel="rbf") if name == "svc" else SklearnKernelRidgeClassifier()
            search_start = time.time()
            search = GridSearchCV(estimator, param_grid, cv=split, refit=False, n_jobs=n_jobs, scoring="accuracy")
            search.fit(x, y)
            trial_params = {**spec.params, schema.DATASET: spec.dataset, schema.MODEL: spec.model}
            for record in _records(spec, name, size, search.cv_results_, search_start):
                recorder.record_trial(record, trial_params, {})
                trials.append(record)
        makespan = time.perf_counter() - started
        summary = SearchSummary(
            trials_total=len(trials),
            trials_finished=len(trials),
            trials_failed=0,
            concurrency=n_jobs if n_jobs > 0 else os.cpu_count() or 1,
            makespan_s=makespan,
            ray_start_s=0.0,
            time_to_first_trial_s=0.0,
            trial_wall_sum_s=sum(t.metrics[schema.TRIAL_WALL_S] for t in trials),
            best_metric=max(t.metrics[schema.TEST_ACCURACY] for t in trials),
        )
        status = SearchStatus.FINISHED
        return recorder.parent_run_id, summary, trials
    except BaseException as err:
        error = f"{type(err).__name__}: {err}"
        raise
    finally:
        recorder.finish(summary, status, error)


def _records(spec: ExperimentSpec, name: str, size, results, search_start: float) -> Iterator[TrialRecord]:
    """GridSearchCV's results for one training size, a trial record per configuration (each made as it is recorded)."""
    for i, params in enumerate(results["params"]):
        alpha = params["alpha"] if "alpha" in params else 1 / params["C"]
        config = {"alpha": _match(alpha, spec, "alpha"), "gamma": params["gamma"], "train_size": size}
        config = {k: v for k, v in config.items() if k in spec.grid}
        fit_s, score_s = float(results["mean_fit_time"][i]), float(results["mean_score_time"][i])
        yield TrialRecord(
            trial_id=f"{name}-{size}-{i}",
            config=config,
            repeat=0,
            status=TrialStatus.FINISHED,
            metrics={schema.FIT_S: fit_s, schema.EVAL_S: score_s, schema.TRIAL_WALL_S: fit_s + score_s,
                     schema.TEST_ACCURACY: float(results["mean_test_score"][i])},
            tags={schema.DEVICE_REQUESTED: "cpu", schema.DEVICE_ACTUAL: "cpu:0", "estimator": name,
                  **({"C": f"{params['C']:g}"} if "C" in params else {})},
            started_at=search_start,
            ended_at=time.time(),
        )  # fmt: skip


def _match(alpha: float, spec: ExperimentSpec, axis: str) -> float:
    """The spec's own value for alpha (1 / (1 / alpha) may differ from it in the last bit)."""
    values = spec.grid.get(axis, (spec.params.get(axis),))
    return min(values, key=lambda v: abs(v - alpha))
