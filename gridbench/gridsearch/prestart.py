"""Workers for Tune's trial actors, started as soon as a local Ray is up, their imports done ahead (issue 40).

Ray gives an actor an idle worker only where the worker's runtime_env hash equals the actor's
(the raylet's WorkerPool::WorkerFitForLease: job, language, worker type, is_gpu and is_actor_worker
unset or equal, runtime_env hash, dynamic options; never its resources). Tune gives its trial
actors a runtime_env of their own (ray.tune.execution.class_cache), which the driver's core worker
merges with the job's (CoreWorker::OverrideTaskOrActorRuntimeEnvInfo). The raylet's PrestartWorkers
RPC (node_manager.proto) starts idle workers for a given runtime_env; asked for the merged one, a
trial actor lands in them (benchmarks/prestart_probe.py: every trial did, in 24 of 24). Where Tune's
actors have no runtime_env of their own (gridbench.gridsearch.plain_workers, one node), they take the
job's, and the workers are asked for with it.

Each worker then imports ahead what its trials need: the job's worker_process_setup_hook
(gridbench.trial.prestart.import_ahead, named by module path) reads this search's plan file, whose
path the job's env_vars carry. The file is written before the workers are asked for: Ray starts
before planning may know the backend (asking the backends about GPUs runs beside Ray's start).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any, Mapping

from gridbench.gridsearch import tuning
from gridbench.gridsearch.plain_workers import KEEP_ALIVE_S, start_idle_workers, tune_actor_runtime_env
from gridbench.trial import prestart as worker_side
from gridbench.trial import steps as worker_steps

if TYPE_CHECKING:
    from gridbench.gridsearch.options import SearchPlan

TUNE_TRAINABLE_MODULE = "ray.tune.trainable.function_trainable"  # where Tune's trial actor's class is defined


def actor_serialized_env(job_serialized: str, actor_env: Mapping[str, Any]) -> str:
    """The runtime_env string Ray hashes for an actor the driver creates with `actor_env`.

    With no job runtime_env the core worker keeps the actor's own serialisation (Python's
    RuntimeEnv.serialize); with one, it merges the two in C++ (CoreWorker::OverrideRuntimeEnv:
    the actor's keys replace the job's, env_vars are merged) and nlohmann::json writes the
    result: keys sorted, no spaces.
    """
    if job_serialized in ("", "{}"):
        from ray.runtime_env import RuntimeEnv

        return RuntimeEnv(**actor_env).serialize()
    merged = json.loads(job_serialized)
    for key, value in actor_env.items():
        if key == "env_vars" and "env_vars" in merged:
            merged["env_vars"] = {**merged["env_vars"], **value}
        else:
            merged[key] = value
    return json.dumps(merged, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def prestart_workers(
    count: int, raylet: tuple[str, int] | None = None, keep_alive_s: int = KEEP_ALIVE_S, tune_env: bool = True
) -> None:
    """Asks the local raylet, or `raylet` (address, port), to start `count` idle workers that Tune's trial actors will
    take: with Tune's runtime_env merged with the job's, or with the job's alone where Tune's actors have none of
    their own (`tune_env` False: gridbench.gridsearch.plain_workers).

    The request is answered at once; the workers start, register and run the job's worker_process_setup_hook
    while the driver goes on. A local Ray only: its head, or a node it started (gridbench.gridsearch.gpu_nodes).
    """
    serialized = None  # the job's: start_idle_workers reads it
    if tune_env:
        import ray

        job_env = ray._private.worker.global_worker.core_worker.get_job_config().runtime_env_info
        serialized = actor_serialized_env(job_env.serialized_runtime_env, tune_actor_runtime_env())
    start_idle_workers(count, serialized, raylet, keep_alive_s)


def job_runtime_env(runtime_env: Mapping[str, Any] | None, plan_file: str) -> dict[str, Any]:
    """The job's runtime_env with the setup hook that imports ahead, and where it finds the plan's file.

    A user's uploaded modules (py_modules, working_dir) stay: the prestarted workers are asked for the
    job's env as Ray holds it once uploaded (prestart_workers).
    """
    env = dict(runtime_env or {})
    env["env_vars"] = {**env.get("env_vars", {}), worker_side.PLAN_ENV: plan_file}
    env["worker_process_setup_hook"] = worker_side.HOOK
    return env


def data_to_read_ahead(plan: SearchPlan) -> dict[str, Any] | None:
    """The data the hook reads for the trials, as their context names them (gridbench.gridsearch.tuning), or None.

    With the imports ahead, nothing hid the first trial's own read where the hook had started its GPU: on one H200
    the prestarted first trials took 0.685-0.720 s with the read ahead, against 1.027-1.196 s without it on another
    machine (docs/results/around-training.md, "eleventh").
    """
    source = plan.data
    if not worker_steps.file_read_early(source):
        return None
    return {"name": source.name, "path": source.path, "seed": plan.spec.seed, "flat": plan.spec.workload.flat_inputs}


def write_plan(plan: SearchPlan, plan_file: str) -> None:
    """What the hook imports, and the environment it imports it in: the trial's (gridbench.trial.context)."""
    # The trainable's module, and Tune's trainable class, which Ray unpickles as the trial's actor is created: without
    # it, each worker's first trial imported ray.tune there (the headline's worker on an H100 spent 2.10 s of py-spy's
    # samples loading the class, 0.00 s with it: docs/results/around-training.md, "fifth").
    modules = [tuning.__name__, TUNE_TRAINABLE_MODULE]
    keras = False
    if not (plan.options.device == "gpu" and plan.backend == "torch"):
        # The workload's: Keras on the plan's backend. Not torch's on a GPU: Keras' torch backend asks
        # torch.cuda.is_available() as it is imported, which starts CUDA with every GPU visible, before Ray
        # says which one the trial gets. JAX, TensorFlow and CuPy start no device on import.
        modules.append(plan.spec.workload.train.partition(":")[0])
        keras = plan.spec.workload.framework == "keras"  # imported first, without scikit-learn (trial.keras_import)
    wanted = {
        "backend": plan.backend,
        "device": plan.options.device,
        "cpus": plan.cpus_per_trial,
        "gpus_per_trial": plan.gpus_per_trial,
        "modules": modules,
        "keras": keras,
        "data": data_to_read_ahead(plan),
    }
    temporary = plan_file + ".tmp"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(wanted, file)
    os.replace(temporary, plan_file)  # a worker never reads half of it
