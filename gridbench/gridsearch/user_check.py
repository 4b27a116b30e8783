"""A user's own model and data, checked in the driver before anything is written, and shipped to Ray's workers.

plan_search calls `locate` (where the data is) and `check` (the model built and run on
the data's samples in a CPU subprocess, the data's labels and values, the training set
against the trial's memory share, estimated); run_search starts Ray with `runtime_env`,
which uploads the user's modules so that workers import them here and on a cluster.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gridbench.datasets import SHAPES, DataSource
from gridbench.datasets.find import locate as locate_builtin
from gridbench.errors import UserError

if TYPE_CHECKING:
    from gridbench.datasets.user_data import DataFacts
    from gridbench.gridsearch.options import SearchOptions, SearchPlan
    from gridbench.spec import ExperimentSpec

# Distinct configurations of the user's hyperparameters built by the check; more would cost seconds each.
PROBED_CONFIGURATIONS = 16
PROBE_TIMEOUT_S = 600


def locate(spec: ExperimentSpec, options: SearchOptions) -> DataSource:
    """The spec's data source: the user's own data (checked by `check`), or a built-in dataset found as usual."""
    own = spec.user_data
    if own is None:
        return locate_builtin(spec.dataset, options.data_dir, options.synthetic)
    if options.synthetic:
        raise UserError("--synthetic makes random data of a built-in dataset's shapes; with your own data, drop it")
    if own.kind == "npz" and not Path(own.reference).is_file():
        raise UserError(
            f"dataset {own.reference} does not exist (a relative path is read from the spec's folder); fix the path"
        )
    return DataSource(spec.dataset, own.reference if own.kind == "npz" else None, user=own)


def check(plan: SearchPlan) -> float:
    """Checks the user's model on the data, and the data itself; returns the seconds the check took."""
    import time

    from gridbench.datasets.user_data import DataFacts, inspect, load_arrays, read_inputs

    start = time.perf_counter()
    spec, data = plan.spec, plan.data
    request: dict[str, Any] = {
        "reference": spec.user_model.reference,
        "model_builder": spec.workload.model_builder,
        "declared": sorted(spec.user_model.declared),
        "configs": _distinct_configurations(spec),
        "data": None,
    }
    facts = None
    if data.user is not None and data.user.kind == "arrays":  # already in this process: checked here
        arrays = load_arrays(data.user)
        facts = inspect(arrays, "the arrays given")
        request.update(sample=read_inputs(arrays["x_train"][:2]), num_classes=facts.num_classes)
    elif data.user is not None:
        request["data"] = data.user
    else:
        request.update(_builtin_sample(spec))
    result = _run_probe(request, plan.backend)
    if result.get("facts"):
        facts = DataFacts(**{**result["facts"], "sample_shape": tuple(result["facts"]["sample_shape"])})
    if facts is not None:
        _check_sizes(plan, facts)
    return time.perf_counter() - start  # the subprocess's start and imports included


def _distinct_configurations(spec: ExperimentSpec) -> list[dict[str, Any]]:
    declared = set(spec.user_model.declared)
    seen, configs = set(), []
    for point in spec.configurations():
        config = {**spec.params, **point}
        key = tuple(sorted((k, v) for k, v in config.items() if k in declared))
        if key not in seen:
            seen.add(key)
            configs.append(config)
        if len(configs) == PROBED_CONFIGURATIONS:
            break
    return configs


def _builtin_sample(spec: ExperimentSpec) -> dict[str, Any]:
    import numpy as np

    shape = SHAPES[spec.dataset]
    if shape.kind == "image":
        return {"sample": np.zeros((2, *shape.sample_shape), np.float32), "num_classes": shape.num_classes}
    maxlen = int(spec.params.get("maxlen", 100))
    return {"sample": np.ones((2, maxlen), np.int32), "num_classes": shape.num_classes}


def _run_probe(request: dict[str, Any], backend: str) -> dict[str, Any]:
    import cloudpickle

    env = {
        **os.environ,
        "KERAS_BACKEND": backend,
        # On the CPU: the check must not take GPU memory that trials need.
        "CUDA_VISIBLE_DEVICES": "",
        "JAX_PLATFORMS": "cpu",
        "TF_CPP_MIN_LOG_LEVEL": "3",
        # What this process imports, the check imports too (a module on sys.path, a notebook's folder).
        "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gridbench.workloads.user_probe"],
            input=cloudpickle.dumps(request),
            capture_output=True,
            env=env,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        raise UserError(
            f"checking model {request['reference']} took over {PROBE_TIMEOUT_S} s; "
            f"does its builder or loader wait on something?"
        ) from None
    lines = done.stdout.decode(errors="replace").strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        last = (done.stderr.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"checking model {request['reference']} failed (exit {done.returncode}: {last[:300]}); "
            f"run its builder alone to see why"
        ) from None
    if "error" in result:
        raise UserError(result["error"])
    return result


def _check_sizes(plan: SearchPlan, facts: DataFacts) -> None:
    """Batches no larger than the training set; the training set within the trial's memory share (estimated)."""
    spec = plan.spec
    sizes = [int(s) for s in _values(spec, "train_size")]
    largest_share = max((s or facts.train for s in sizes), default=facts.train)
    if largest_share > facts.train:
        raise UserError(f"train_size {largest_share} is more than the {facts.train} training samples; use at most that")
    smallest = min((s or facts.train for s in sizes), default=facts.train)
    batch = max(int(b) for b in _values(spec, "batch_size"))
    if batch > smallest:
        raise UserError(
            f"batch_size {batch} is more than the {smallest} training samples; use a batch_size of at most that"
        )
    needed = facts.train_bytes * largest_share // facts.train
    share, what = memory_share(plan)
    if share and needed > share:
        raise UserError(
            f"the training set needs about {needed / 2**30:.2f} GiB in each trial (estimated: {largest_share} "
            f"samples of {list(facts.sample_shape)} x 4 bytes), more than the trial's share of {what}, about "
            f"{share / 2**30:.2f} GiB (estimated); run fewer trials at once (--max-concurrent, --gpus-per-trial 1) "
            f"or train on part of it (train_size)"
        )


def memory_share(plan: SearchPlan) -> tuple[int, str]:
    """An estimate of the memory one trial may fill, in bytes, and what it is a share of (0: unknown)."""
    from gridbench import environment
    from gridbench.trial.gpu_memory import memory_fraction

    if plan.options.device == "gpu":
        gpus = environment.gpus()
        if not gpus:  # on a cluster from a driver without a GPU: the nodes' memory is not known here
            return 0, "GPU memory"
        total = float(gpus[0]["memory_gib"]) * 2**30
        return int(total * memory_fraction(plan.gpus_per_trial)), f"{gpus[0]['name']} memory"
    if plan.options.address:
        return 0, "memory"
    import psutil

    trials = plan.concurrency
    return int(psutil.virtual_memory().total / trials), f"this machine's memory ({trials} trial(s) at once)"


def _values(spec: ExperimentSpec, name: str) -> tuple:
    return tuple(spec.grid[name]) if name in spec.grid else ((spec.params[name],) if name in spec.params else ())


def runtime_env(spec: ExperimentSpec) -> dict[str, Any] | None:
    """Ray's runtime_env uploading the user's model and loader modules, so that every worker imports them.

    Installed packages are left out (the nodes have them); a module in the current
    directory, the spec's folder or on PYTHONPATH is uploaded, here and to a cluster.
    """
    modules = []
    if spec.user_model is not None:
        modules.append((spec.user_model.reference, spec.user_model.base_dir, spec.user_model.builder))
    if spec.user_data is not None and spec.user_data.kind == "loader":
        modules.append((spec.user_data.reference, spec.user_data.base_dir, spec.user_data.payload))
    paths = []
    for reference, base_dir, function in modules:
        path = _module_location(reference.partition(":")[0].split(".")[0], base_dir, function)
        if path and path not in paths:
            paths.append(path)
    return {"py_modules": paths} if paths else None


def _module_location(top_level: str, base_dir: str | None, function: Any) -> str | None:
    """The file or package folder of a top-level module that is not installed; None if installed or __main__."""
    import importlib.util

    if function is not None and getattr(function, "__module__", "__main__") == "__main__":
        return None  # a notebook's or script's function travels by value (cloudpickle)
    added = bool(base_dir) and base_dir not in sys.path
    if added:
        sys.path.append(base_dir)
    try:
        found = importlib.util.find_spec(top_level)
    except (ImportError, ValueError):
        found = None
    finally:
        if added:
            sys.path.remove(base_dir)
    if found is None or not found.origin and not found.submodule_search_locations:
        return None
    location = (
        str(Path(found.origin).parent)
        if found.submodule_search_locations and found.origin
        else (found.origin or next(iter(found.submodule_search_locations)))
    )
    installed = {sysconfig.get_paths()[key] for key in ("purelib", "platlib", "stdlib", "platstdlib")}
    if any(Path(location).resolve().is_relative_to(Path(root).resolve()) for root in installed if root):
        return None
    return location
