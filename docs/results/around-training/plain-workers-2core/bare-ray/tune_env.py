"""`python tune_env.py tune|inherit|prestart`: a bare Ray Tune run of 2 one-line trials, one at a time, on a local Ray
started by plain ray.init (Ray's own setup_worker.py, not gridbench's lean start), 2 CPUs. tune: Tune's actors with
their runtime_env; inherit: PL_DISABLE_FORK set before ray.init and Tune's class cache giving actors none; prestart:
as inherit, and one plain idle worker asked of the raylet right after ray.init. Then SLEEP seconds (all modes),
so that a worker asked for has started, then Tune: prints when the first trial began after Tuner.fit was called.
(Reformatted for ruff after out.txt was written; the steps are the same.)
"""

import os
import sys
import tempfile
import time

mode = sys.argv[1]
os.environ.update(RAY_USAGE_STATS_ENABLED="0", TUNE_DISABLE_AUTO_CALLBACK_LOGGERS="1", RAY_AIR_NEW_OUTPUT="0")
if mode in ("inherit", "prestart"):
    os.environ["PL_DISABLE_FORK"] = "1"

import ray  # noqa: E402
from ray import tune  # noqa: E402


def start_plain_worker() -> None:
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    w = ray._private.worker.global_worker
    req = node_manager_pb2.PrestartWorkersRequest(
        language=common_pb2.PYTHON, job_id=w.current_job_id.binary(), num_workers=1, keep_alive_duration_secs=600
    )
    req.runtime_env_info.serialized_runtime_env = "{}"
    with init_grpc_channel(f"{w.node.node_ip_address}:{w.node.node_manager_port}") as ch:
        node_manager_pb2_grpc.NodeManagerServiceStub(ch).PrestartWorkers(req, timeout=10)


def no_runtime_env(self, trainable_cls):
    if trainable_cls not in self._cache:
        self._cache[trainable_cls] = ray.remote(trainable_cls)
    return self._cache[trainable_cls]


def trainable(config):
    import os
    import time

    return {"began": time.time(), "pl": os.environ.get("PL_DISABLE_FORK"), "pid": os.getpid(), "ppid": os.getppid()}


t0 = time.time()
system = {"prestart_worker_first_driver": False}
ray.init(include_dashboard=False, num_cpus=2, log_to_driver=False, _system_config=system)
t1 = time.time()
if mode == "prestart":
    start_plain_worker()
time.sleep(float(os.environ.get("SLEEP", "0")))
if mode in ("inherit", "prestart"):
    from ray.tune.execution import class_cache

    class_cache._ActorClassCache.get = no_runtime_env
t2 = time.time()
res = tune.Tuner(
    trainable,
    param_space={"x": tune.grid_search([1, 2])},
    tune_config=tune.TuneConfig(max_concurrent_trials=1),
    run_config=tune.RunConfig(verbose=0, storage_path=tempfile.mkdtemp()),
).fit()
t3 = time.time()
rows = [r.metrics for r in res]
began = min(r["began"] for r in rows) - t2
print(mode, f"init {t1 - t0:.2f}", f"first began +{began:.2f} after fit", f"fit {t3 - t2:.2f}", [r["pl"] for r in rows],
      [r["pid"] for r in rows])  # fmt: skip
ray.shutdown()
