"""Workers started for Tune's trial actors before the trials are due (gridbench.gridsearch.prestart)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from gridbench.gridsearch.prestart import actor_serialized_env, tune_actor_runtime_env


def test_tunes_actor_env_is_its_default_and_the_variables_it_propagates():
    env = tune_actor_runtime_env({"AWS_ACCESS_KEY_ID": "key", "HOME": "/root"})
    assert env == {"env_vars": {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "key"}}


def test_without_a_job_env_the_actor_keeps_pythons_serialisation():
    serialized = actor_serialized_env("{}", {"env_vars": {"PL_DISABLE_FORK": "1"}})
    assert serialized == '{"env_vars": {"PL_DISABLE_FORK": "1"}}'


def test_with_a_job_env_the_two_merge_as_rays_core_worker_writes_them():
    job = '{"env_vars": {"A": "1", "PL_DISABLE_FORK": "0"}, "py_modules": ["gcs://_ray_pkg_x.zip"]}'
    merged = actor_serialized_env(job, {"env_vars": {"PL_DISABLE_FORK": "1"}})
    assert merged == '{"env_vars":{"A":"1","PL_DISABLE_FORK":"1"},"py_modules":["gcs://_ray_pkg_x.zip"]}'


TRIAL_IN_PRESTARTED = textwrap.dedent(
    """
    import json, os, sys, tempfile, time
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] = "1"
    import psutil, ray
    from ray import tune
    from ray._private import ray_constants
    from gridbench.gridsearch.prestart import prestart_workers

    runtime_env = None
    if sys.argv[1] == "py_modules":
        folder = tempfile.mkdtemp()
        with open(os.path.join(folder, "uploaded_module.py"), "w") as module:
            module.write("X = 1\\n")
        runtime_env = {"py_modules": [os.path.join(folder, "uploaded_module.py")]}
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level="ERROR",
             runtime_env=runtime_env, _system_config={"prestart_worker_first_driver": False})
    raylet = psutil.Process(ray._private.worker._global_node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0]
                            .process.pid)

    def workers():
        return {p.pid for p in raylet.children() if "default_worker.py" in " ".join(p.cmdline())
                or p.name().startswith("ray::") and "Agent" not in p.name()}

    prestart_workers(1)
    deadline = time.monotonic() + 60
    while not workers() and time.monotonic() < deadline:
        time.sleep(0.2)
    prestarted = workers()

    def trainable(config):
        tune.report({"pid": os.getpid()})

    results = tune.Tuner(tune.with_resources(trainable, {"cpu": 1}),
                         run_config=tune.RunConfig(storage_path=tempfile.mkdtemp(), verbose=0)).fit()
    print("PIDS " + json.dumps({"prestarted": sorted(prestarted), "trial": results[0].metrics["pid"]}))
    ray.shutdown()
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("job_env", ["none", "py_modules"])
def test_a_tune_trial_runs_in_the_worker_started_for_it(job_env, tmp_path):
    """Fails if Ray or Tune change the trial actor's runtime_env, or how Ray hashes it: the trial then starts a
    worker of its own."""
    result = subprocess.run(
        [sys.executable, "-c", TRIAL_IN_PRESTARTED, job_env],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    line = next((x for x in result.stdout.splitlines() if x.startswith("PIDS ")), None)
    assert line, result.stdout[-2000:] + result.stderr[-3000:]
    pids = json.loads(line[5:])
    assert len(pids["prestarted"]) == 1
    assert pids["trial"] in pids["prestarted"]
