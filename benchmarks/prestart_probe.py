"""Do Tune's trial actors land in workers started, and their framework imported, before the trials were due?

    python benchmarks/prestart_probe.py [--modes today,prestart,prestart-hook] [--runs 3] [--trials 2] [--cpus 2]
    PROBE_GAP_S=12 python benchmarks/prestart_probe.py ...   # seconds from Ray's start to the search (default 3)

A prototype for issue 40, standalone (not gridbench's code path). One local Ray (2 CPUs), then a Tune search of
`--trials` trials, reuse_actors on, one CPU each, whose function trainable imports Keras (KERAS_BACKEND=jax, on
the CPU) and reports its pid, its process's start time, when it began, and how long `import keras` took in it.

- today: as gridbench does now: no worker is started before Tune asks (prestart_worker_first_driver off).
- prestart: right after ray.init, the raylet's PrestartWorkers RPC (Ray's own, node_manager.proto) starts one idle
  worker per concurrent trial, with the runtime_env Tune gives its actors ({"env_vars": {"PL_DISABLE_FORK": "1"}}),
  and the raylet's `preload_python_modules` makes each Python worker import keras before it takes work.
- prestart-bare: the same workers, prestarted, importing nothing ahead (keras is imported by the trial).
- prestart-hook: the same, but the import is a `worker_process_setup_hook` in ray.init's runtime_env (which a
  Tune actor inherits); the prestarted workers are asked for the merged env, serialised as Ray's C++ merges it.

It prints one JSON line per run: per trial, its pid, whether that pid is among the prestarted ones, its process
start relative to the search's submission (tuner.fit), the trainable's start relative to it, and the import time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = (
    "0"  # as gridbench: servers on 127.0.0.1 (lifecycle.local_ray_environment)
)
os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")

GAP_S = float(os.environ.get("PROBE_GAP_S", "3"))  # from Ray's start to the search's submission
TUNE_ACTOR_ENV = {"env_vars": {"PL_DISABLE_FORK": "1"}}  # ray/tune/execution/class_cache.py DEFAULT_ENV_VARS


def import_keras() -> None:
    """The setup hook (prestart-hook): runs in each worker after it registered, before its task loop."""
    import keras  # noqa: F401

    os.environ["PROBE_HOOK_DONE"] = repr(time.time())  # the trainable reads it: when this worker was ready


def trainable(config):
    from ray import tune

    began = time.time()
    keras_before = "keras" in sys.modules
    t0 = time.perf_counter()
    import keras  # noqa: F401

    import_s = time.perf_counter() - t0
    time.sleep(1.0)  # so that the two trials overlap, each in a worker of its own
    tune.report(
        {
            "pid": os.getpid(),
            "created": process_created(),
            "began": began,
            "import_s": import_s,
            "keras_before": keras_before,
            "hook_done": float(os.environ.get("PROBE_HOOK_DONE", "nan")),
        }
    )


def worker_pids() -> dict[int, float]:
    """This Ray's worker processes (the raylet's children that run default_worker.py) and their start times."""
    import psutil
    import ray
    from ray._private import ray_constants

    node = ray._private.worker._global_node
    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    found = {}
    for proc in raylet.children(recursive=True):
        try:
            cmd = " ".join(proc.cmdline())
        except psutil.Error:
            continue
        # Ray retitles its workers ("ray::IDLE"); its agents (ray::DashboardAgent, ray::RuntimeEnvAgent) are no workers
        if "default_worker.py" in cmd or (cmd.startswith("ray::") and "Agent" not in cmd):
            found[proc.pid] = proc.create_time()
    return found


def process_created() -> float:
    """This process's start, on time.time()'s clock, to the clock tick (psutil's rounds boot time to 1 s)."""
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - age


def prestart(count: int, runtime_env: dict) -> float:
    """Asks the local raylet to start `count` workers with `runtime_env` for this job; returns when it answered."""
    import ray
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    node = ray._private.worker.global_worker.node
    job_id = ray.get_runtime_context().get_job_id()
    request = node_manager_pb2.PrestartWorkersRequest(
        language=common_pb2.PYTHON,
        job_id=bytes.fromhex(job_id),
        num_workers=count,
        keep_alive_duration_secs=600,  # else an idle worker above the soft limit is killed after ~1 s
    )
    request.runtime_env_info.serialized_runtime_env = serialized_env(runtime_env)
    channel = init_grpc_channel(f"{node.node_ip_address}:{node.node_manager_port}")
    start = time.perf_counter()
    node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=10)
    return time.perf_counter() - start


def serialized_env(runtime_env: dict) -> str:
    """The string Ray hashes for an actor created by the driver with Tune's runtime_env.

    With no job runtime_env, the core worker keeps Python's serialisation (RuntimeEnv.serialize: json.dumps with
    sorted keys); with one, it merges the two in C++ (nlohmann::json: sorted keys, no spaces).
    """
    import ray
    from ray.runtime_env import RuntimeEnv

    job_env = ray.get_runtime_context().runtime_env  # the job's, as the driver holds it
    if not job_env:
        return RuntimeEnv(**runtime_env).serialize()
    merged = json.loads(json.dumps(dict(job_env)))
    for key, value in runtime_env.items():
        if key == "env_vars" and "env_vars" in merged:
            merged["env_vars"] = {**merged["env_vars"], **value}
        else:
            merged[key] = value
    return json.dumps(merged, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def one_run(mode: str, trials: int, cpus: int) -> dict:
    import ray

    t_init = time.time()
    system = {"prestart_worker_first_driver": False}
    runtime_env = None
    if mode == "prestart":
        system["preload_python_modules"] = ["keras"]
    if mode == "prestart-hook":
        runtime_env = {"worker_process_setup_hook": import_keras}
    ray.init(
        address="local",
        num_cpus=cpus,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="ERROR",
        runtime_env=runtime_env,
        _system_config=system,
    )
    ray_up = time.time()
    asked = None
    if mode.startswith("prestart"):
        asked = prestart(min(trials, cpus), TUNE_ACTOR_ENV)  # one per concurrent trial
    from ray import tune

    time.sleep(GAP_S)  # what a search does meanwhile (open the store, plan); the same in every mode
    before = worker_pids()
    storage = tempfile.mkdtemp(prefix="prestart_probe_")
    submitted = time.time()
    tuner = tune.Tuner(
        tune.with_resources(trainable, {"cpu": 1}),
        param_space={"i": tune.grid_search(list(range(trials)))},
        tune_config=tune.TuneConfig(max_concurrent_trials=cpus, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=storage, verbose=0),
    )
    results = tuner.fit()
    done = time.time()
    rows = []
    for result in results:
        m = result.metrics
        rows.append(
            {
                "pid": m["pid"],
                "prestarted": m["pid"] in before,
                "process_start_vs_submit_s": round(m["created"] - submitted, 3),
                "trainable_began_vs_submit_s": round(m["began"] - submitted, 3),
                "trainable_began_vs_ray_init_s": round(m["began"] - t_init, 3),
                "import_keras_s": round(m["import_s"], 3),
                "keras_already_imported": m["keras_before"],
                "hook_done_vs_submit_s": round(m["hook_done"] - submitted, 3),
            }
        )
    ray.shutdown()
    shutil.rmtree(storage, ignore_errors=True)
    return {
        "mode": mode,
        "gap_s": GAP_S,
        "ray_init_s": round(ray_up - t_init, 2),
        "prestart_rpc_s": round(asked, 4) if asked is not None else None,
        "idle_workers_at_submit": len(before),
        "fit_s": round(done - submitted, 2),
        "trials": sorted(rows, key=lambda r: r["trainable_began_vs_submit_s"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--modes", default="today,prestart,prestart-hook", help="comma-separated; runs alternate")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--cpus", type=int, default=2, help="Ray's CPUs: trials at once, one CPU each")
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(one_run(args.modes, args.trials, args.cpus)), flush=True)
        return
    modes = args.modes.split(",")
    runs: dict[str, list] = {mode: [] for mode in modes}
    for _ in range(args.runs):  # each in a fresh driver process, one at a time, the modes alternating
        for mode in modes:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--child",
                    "--modes",
                    mode,
                    "--trials",
                    str(args.trials),
                    "--cpus",
                    str(args.cpus),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(out.stdout[-3000:], out.stderr[-3000:], file=sys.stderr)
                continue
            runs[mode].append(json.loads(line[7:]))
            print(json.dumps(runs[mode][-1]), flush=True)
    for mode in modes:
        print("SUMMARY " + json.dumps(summarise(mode, runs[mode])), flush=True)


def summarise(mode: str, runs: list) -> dict:
    def spread(values):
        return [min(values), round(statistics.median(values), 3), max(values)] if values else None

    return {
        "mode": mode,
        "gap_s": GAP_S,
        "runs": len(runs),
        "last_trainable_began_s": spread([max(t["trainable_began_vs_submit_s"] for t in r["trials"]) for r in runs]),
        "last_began_from_ray_init_s": spread(
            [max(t["trainable_began_vs_ray_init_s"] for t in r["trials"]) for r in runs]
        ),
        "import_keras_s": spread([t["import_keras_s"] for r in runs for t in r["trials"]]),
        "fit_s": spread([r["fit_s"] for r in runs]),
        "trials_in_prestarted": f"{sum(t['prestarted'] for r in runs for t in r['trials'])}/"
        f"{sum(len(r['trials']) for r in runs)}",
    }


if __name__ == "__main__":
    main()
