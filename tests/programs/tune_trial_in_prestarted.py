"""`python tune_trial_in_prestarted.py none|py_modules|hook`: one bare Ray Tune trial after one worker was prestarted
for Tune's trial actors (gridbench.gridsearch.prestart), with no job runtime_env, with one of uploaded modules, or
with uploaded modules and the search's setup hook and a plan file that names Tune's trainable module and no Keras
(gridbench.gridsearch.prestart.job_runtime_env); prints `PIDS {"prestarted": [...], "trial": PID, "ahead": {...}}`,
"ahead" being what the hook recorded in the trial's worker, if it ran there (test_prestart)."""

import json
import os
import sys
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"

import psutil  # noqa: E402
import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray._private import ray_constants  # noqa: E402

from gridbench.gridsearch.prestart import TUNE_TRAINABLE_MODULE, job_runtime_env, prestart_workers  # noqa: E402
from gridbench.trial import prestart as worker_side  # noqa: E402


def workers(raylet: psutil.Process) -> set[int]:
    """The raylet's worker processes (its agents are no workers)."""
    found = set()
    for process in raylet.children(recursive=True):
        try:
            line = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if "default_worker.py" in line or (line.startswith("ray::") and "Agent" not in line):
            found.add(process.pid)
    return found


def trainable(config):
    tune.report({"pid": os.getpid(), "ahead": os.environ.get(worker_side.DONE_ENV, "null")})


if __name__ == "__main__":
    runtime_env = None
    if sys.argv[1] in ("py_modules", "hook"):
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "uploaded_module.py"), "w") as module:
            module.write("X = 1\n")
        runtime_env = {"py_modules": [os.path.join(folder, "uploaded_module.py")]}
    if sys.argv[1] == "hook":
        plan_file = os.path.join(tempfile.mkdtemp(), "prestart.json")
        with open(plan_file, "w") as plan:
            json.dump({"backend": "jax", "device": "cpu", "cpus": 1, "gpus_per_trial": 0.0, "keras": False,
                       "modules": [TUNE_TRAINABLE_MODULE]}, plan)  # fmt: skip
        runtime_env = job_runtime_env(runtime_env, plan_file)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env=runtime_env, _system_config={"prestart_worker_first_driver": False})  # fmt: skip
    node = ray._private.worker._global_node
    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    prestart_workers(1)
    deadline = time.monotonic() + 60
    while not workers(raylet) and time.monotonic() < deadline:
        time.sleep(0.2)
    prestarted = workers(raylet)
    results = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0),
    ).fit()
    found = {"prestarted": sorted(prestarted), "trial": results[0].metrics["pid"]}
    found["ahead"] = json.loads(results[0].metrics["ahead"])
    print("PIDS " + json.dumps(found), flush=True)
    ray.shutdown()
