"""A worker's imports ahead of its first trial: Ray's worker_process_setup_hook, and what the trial reports of it.

With --prestart-workers, the driver asks a local Ray for one idle worker per trial that can run at once as soon
as Ray is up (gridbench.gridsearch.prestart). Each worker of the search runs `import_ahead` once it has registered
with Ray, before it takes any task: it imports Keras on the plan's backend and the trial's modules, as the
driver's file at $GRIDBENCH_PRESTART_PLAN names them. Ray says which GPU a trial gets only when it hands the trial
its worker, so a device starts ahead only where the worker sees one GPU, the one its trials will get: there a GPU
plan on JAX starts the backend on a thread beside the imports. A GPU plan starts NVML ahead too, and describes every
GPU the worker may be given (its trials' GPU tags). Data that read without imports (mnist, cifar10) begin their read
on a thread that outlives the hook, on a CPU or where the hook starts the GPU: the first trial waits only for what is
left of it.
The worker's first trial reports when the imports ran and how long they took, and the device's start within them
(`ahead_of_trial`); they are outside its own wall time, and the search's summary shows them apart.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import time

from gridbench import collector
from gridbench.datasets import DataSource
from gridbench.tracking import schema
from gridbench.trial import gpu_monitor, keras_import, steps
from gridbench.trial.context import process_environment

PLAN_ENV = "GRIDBENCH_PRESTART_PLAN"  # in the job's runtime_env: the file naming what the trials import
DONE_ENV = "GRIDBENCH_IMPORTED_AHEAD"  # set in this worker by the hook: when the imports ran, and how long
HOOK = f"{__name__}.import_ahead"  # the job's worker_process_setup_hook, by module path (Ray imports it)

_reported: dict[str, str] = {}  # this worker's imports ahead, once its first trial has taken them


def import_ahead() -> None:
    """Imports what the plan's trials need, once per worker, before its first task; never raises.

    Ray ends a worker whose setup hook raises: a failed import here is left to the trial, which meets it again
    and reports it as its own failure.
    """
    started_at, start = time.time(), time.perf_counter()
    try:
        with open(os.environ[PLAN_ENV], encoding="utf-8") as file:
            plan = json.load(file)
        os.environ.update(process_environment(plan["backend"], plan["device"], plan["cpus"], plan["gpus_per_trial"]))
    except (KeyError, OSError, ValueError, TypeError):
        return  # no plan (the search ended first, or its directory is gone): the trial imports as usual
    imported, failed, serializers = [], "", False
    collector.pause_for_startup()  # as a trial's worker imports its framework (gridbench.collector)
    device_ahead = _start_device_ahead(plan)
    data_read_started_at = _start_data_read_ahead(plan, device_ahead)
    try:
        if plan.get("keras"):
            keras_import.import_keras()
            imported.append("keras")
        for module in plan["modules"]:
            importlib.import_module(module)
            imported.append(module)
        serializers = _ray_serializers_built()
    except Exception as err:  # noqa: BLE001 - the trial imports it again and names the failure
        failed = f"{type(err).__name__}: {err}".splitlines()[0][:200]
    finally:
        device_start_s = steps.backend_started_ahead() if device_ahead else None
        collector.resume_after_startup()
    done = {
        "started_at": started_at,
        "ended_at": time.time(),
        "import_s": time.perf_counter() - start,
        "modules": imported,
        "ray_serializers": serializers,
        "failed": failed,
        "process_started_at": _process_started_at(),
        "device_start_s": device_start_s,
        "data_read_started_at": data_read_started_at,
    }
    os.environ[DONE_ENV] = json.dumps(done)


def _start_data_read_ahead(plan: dict, device_ahead: bool) -> float | None:
    """Starts reading the plan's data on a thread that outlives the hook, so the first trial finds them read or
    waits for the rest (gridbench.trial.steps); when the read began, or None where none is read here.

    Not in a GPU worker whose device starts in its trial: the read ran beside that start there, and the trial waited
    for the start. Read here instead, at 2 GPUs, the first trials waited no less for the device before their setup,
    and the hooks ran longer (docs/results/around-training.md, "eleventh").
    """
    data = plan.get("data")
    if not data or (plan.get("device") == "gpu" and not device_ahead):
        return None
    try:
        source = DataSource(data["name"], data["path"])
        started_at = time.time()
        return started_at if steps.start_data_read_ahead(source, data["seed"], data["flat"]) else None
    except (KeyError, TypeError):  # a plan from another version: the trial reads its data, as before
        return None


def _start_device_ahead(plan: dict) -> bool:
    """For a GPU plan: NVML started and every GPU it may be given described, and on JAX, where this worker sees one GPU
    only, the backend's start begun on a thread (gridbench.trial.steps). Seeing several, the worker cannot know its
    trials' GPU: starting them all took 3.3 s on 4 H200s, with a context held on each (benchmarks/device_start.py,
    backend-ahead). True: started."""
    if plan.get("device") != "gpu":
        return False
    with contextlib.suppress(Exception):  # no NVML: the trial meets the failure and reports it, as before
        gpu_monitor.nvml()  # for the trial's GPU tags and sampling; its first trial started it before
        # Each GPU's tags, whichever the trials get. In a first trial they are its process setup's one device call,
        # beside its device's start: that setup took 0.70 and 0.95 s in two of 4 first trials at once on 4 H100s,
        # 0.010 and 0.018 s in the others (process_setup_s, around-training/h100x4-7390c4d/scale/a-on-first.txt).
        for index in gpu_monitor.visible_indices():
            with contextlib.suppress(Exception):  # a GPU NVML cannot describe: its trial asks again, and says why
                gpu_monitor.describe(index)
    if plan.get("backend") != "jax":
        return False
    try:
        if gpu_monitor.visible_count() != 1:
            return False
    except Exception:  # noqa: BLE001 - NVML could not count them: the trial starts its own device
        return False
    steps.start_jax_backend_ahead()
    return True


def _ray_serializers_built() -> bool:
    """Builds this Ray worker's serialization context, which the trial's actor otherwise builds as it is unpickled:
    Ray's serializers for pydantic, starlette and Arrow import them: a small part of the class's load.

    Outside a Ray worker there is none to build.
    """
    if "ray" not in sys.modules:
        return False  # not a Ray worker, and not worth importing Ray to find out
    import ray

    if not ray.is_initialized():
        return False
    ray._private.worker.global_worker.get_serialization_context()  # Ray's own: no public way to build it ahead
    return True


def ahead_of_trial() -> tuple[dict[str, str], dict[str, float]]:
    """The tags every trial of this worker reports, and the metrics its first trial reports, of its imports ahead.

    Every trial says whether its worker imported ahead (worker.imported_ahead); the worker's first trial also
    says when the imports ran and how long they took, so that the search counts each worker's once, and when its
    process started, imported ahead or not (a plain worker's too: how long it waited before its first trial).
    """
    done = os.environ.pop(DONE_ENV, None)
    if done is None:
        first = "ahead" not in _reported
        _reported.setdefault("ahead", "false")
        started = _process_started_at() if first else None
        metrics = {} if started is None else {schema.WORKER_PROCESS_STARTED_AT: started}
        return {schema.WORKER_IMPORTED_AHEAD: _reported["ahead"]}, metrics
    ahead = json.loads(done)
    _reported["ahead"] = "true" if not ahead["failed"] else "false"
    metrics = {
        schema.WORKER_IMPORT_AHEAD_S: ahead["import_s"],
        schema.WORKER_IMPORT_AHEAD_STARTED_AT: ahead["started_at"],
        schema.WORKER_IMPORT_AHEAD_ENDED_AT: ahead["ended_at"],
    }
    if ahead["process_started_at"] is not None:
        metrics[schema.WORKER_PROCESS_STARTED_AT] = ahead["process_started_at"]
    if ahead.get("device_start_s") is not None:
        metrics[schema.WORKER_DEVICE_START_AHEAD_S] = ahead["device_start_s"]
    if ahead.get("data_read_started_at") is not None:
        metrics[schema.WORKER_DATA_READ_AHEAD_STARTED_AT] = ahead["data_read_started_at"]
    return {schema.WORKER_IMPORTED_AHEAD: _reported["ahead"]}, metrics


def _process_started_at() -> float | None:
    """This process's start (Unix time), to the clock tick; None where Linux's /proc cannot say."""
    try:
        with open("/proc/self/stat") as stat:
            ticks = int(stat.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the name
        return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None
