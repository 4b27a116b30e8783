"""Tune's trial actors on plain workers of a local Ray, started as soon as Ray is up (issue 40; the default since
the twenty-sixth measurement, GRIDBENCH_PLAIN_WORKERS=0 turns it off).

Tune creates each trial actor with a runtime_env of its own: {"env_vars": {"PL_DISABLE_FORK": "1"}} and the few
variables it propagates from the driver (ray.tune.execution.class_cache). Ray hands an actor only a worker started
with the same runtime_env, so no worker can be ready for the first trial before Tune asks for one; it is started
then, on the first trial's path. A local Ray's workers inherit the environment its raylet was started with, the
driver's at ray.init. Where that environment already holds each of Tune's variables with Tune's value, the
runtime_env changes nothing in the worker but how it starts: the search sets Tune's defaults before ray.init
(`inherit_tune_env`, unset again once Ray has started), creates Tune's actors without a runtime_env
(`actors_can_inherit`, decided once; `trial_actors_plain`), and asks the raylet for one plain idle worker per trial
that runs at once as soon as Ray is up (`start_idle_workers`), which the first trials' actors take. A variable that
differs keeps Tune's runtime_env for that search, as before.

--prestart-workers (gridbench.gridsearch.prestart) starts its workers with the job's setup hook, which imports
ahead: on one node, Tune's actors then take the job's runtime_env alone (the hook's), and its workers are asked for
with it, without waiting for Tune's import. A search with a runtime_env of its own (a user's uploaded modules), on a
cluster, or on one node per GPU keeps Tune's way.

On an H100 host of 16 cores, in 10 pairs of the cached headline beside tune_floor.py A, the order alternating, the
first worker began 1.9-2.7 s after the trials' launch with plain workers and 2.0-3.4 s without (sooner in 9 pairs, as
soon in 1), and the whole command was shorter in 7 of the 10 (docs/results/around-training/h100-22d1e84;
"twenty-sixth" in docs/results/around-training.md). On 2 cores it changed nothing measurable ("twenty-fifth").
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from gridbench.errors import UserError

SWITCH_ENV = "GRIDBENCH_PLAIN_WORKERS"  # 0: Tune's runtime_env and no worker started ahead; 1 or unset: on
# ray/tune/execution/class_cache.py's DEFAULT_ENV_VARS (Ray 2.60), known before Ray Tune is imported: ray.init starts
# the raylet, which takes the environment once, while Tune still imports on another thread (tests check the copy).
TUNE_DEFAULT_ENV_VARS = {"PL_DISABLE_FORK": "1"}
KEEP_ALIVE_S = 3600  # the raylet kills an idle worker above its soft limit after ~1 s, unless kept


def wanted(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a local search without a runtime_env of its own starts its trial actors on plain workers (raises
    UserError for a value other than 0 or 1: plan_search asks first, before anything is written)."""
    asked = environ.get(SWITCH_ENV, "")
    if asked not in ("", "0", "1"):
        raise UserError(f"{SWITCH_ENV}={asked!r}: say 1 (plain workers, the default) or 0 (Tune's runtime_env)")
    return asked != "0"


def inherit_tune_env(environ: MutableMapping[str, str] = os.environ) -> tuple[dict[str, str] | None, list[str]]:
    """Before a local Ray's start: sets Tune's default variables where unset. Returns the environment the raylet
    will start its workers with, or None where one of them is set to another value (Tune's actors then keep their
    runtime_env, which sets Tune's), and the names it set (`forget` unsets them once the search's Ray is down)."""
    added = [name for name in TUNE_DEFAULT_ENV_VARS if name not in environ]
    for name in added:
        environ[name] = TUNE_DEFAULT_ENV_VARS[name]
    if any(environ[name] != value for name, value in TUNE_DEFAULT_ENV_VARS.items()):
        return None, added
    return dict(environ), added


def forget(added: list[str], environ: MutableMapping[str, str] = os.environ) -> None:
    """Unsets what inherit_tune_env set: a process that goes on after the search keeps its own environment."""
    for name in added:
        environ.pop(name, None)


def tune_actor_runtime_env(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The runtime_env Tune gives its trial actors, as ray.tune's _ActorClassCache.get builds it."""
    from ray.tune.execution.class_cache import DEFAULT_ENV_VARS, ENV_VARS_TO_PROPAGATE

    env_vars = dict(DEFAULT_ENV_VARS)
    env_vars.update({name: environ[name] for name in ENV_VARS_TO_PROPAGATE if name in environ})
    return {"env_vars": env_vars}


def inherits(inherited: Mapping[str, str] | None, actor_env: Mapping[str, Any]) -> bool:
    """Whether workers started with `inherited` already hold `actor_env`: environment variables only, each equal."""
    if inherited is None or set(actor_env) - {"env_vars"}:
        return False
    return all(inherited.get(name) == value for name, value in actor_env.get("env_vars", {}).items())


def actors_can_inherit(inherited: Mapping[str, str] | None) -> bool:
    """Whether Tune's trial actors can go without a runtime_env of their own: a local Ray's workers inherited each of
    Tune's variables (`inherited`, as inherit_tune_env returned it), and Tune's class cache is as expected (a Ray that
    moved or renamed it keeps Tune's way). The search decides it once (RaySession.actors_plain)."""
    if inherited is None:
        return False
    try:
        from ray.tune.execution import class_cache

        actor_env = tune_actor_runtime_env()
    except (ImportError, AttributeError):  # Ray's own, private: another version may differ
        return False
    return callable(getattr(class_cache._ActorClassCache, "get", None)) and inherits(inherited, actor_env)


@contextlib.contextmanager
def trial_actors_plain(plain: bool) -> Iterator[None]:
    """While Tune runs: its trial actors created without a runtime_env where `plain` (actors_can_inherit).

    Tune has no option for its actors' runtime_env, so its class cache's `get` is replaced for the run and restored
    after it.
    """
    if not plain:
        yield
        return
    import ray
    from ray.tune.execution import class_cache

    tunes_get = class_cache._ActorClassCache.get

    def get(cache, trainable_cls):
        if not isinstance(getattr(cache, "_cache", None), dict):
            return tunes_get(cache, trainable_cls)
        if trainable_cls not in cache._cache:
            cache._cache[trainable_cls] = ray.remote(trainable_cls)
        return cache._cache[trainable_cls]

    class_cache._ActorClassCache.get = get
    try:
        yield
    finally:
        class_cache._ActorClassCache.get = tunes_get


def start_idle_workers(
    count: int,
    serialized_env: str | None = None,
    raylet: tuple[str, int] | None = None,
    keep_alive_s: int = KEEP_ALIVE_S,
) -> None:
    """Asks the local raylet, or `raylet` (address, port), to start `count` idle workers of this job with
    `serialized_env` (the runtime_env string Ray hashes; None: the job's, which an actor without a runtime_env of its
    own takes), kept alive `keep_alive_s`.

    The raylet answers at once (its PrestartWorkers RPC, node_manager.proto); the workers start and register while
    the driver goes on. An actor whose runtime_env hashes the same takes one.
    """
    import ray
    from ray._private.grpc_utils import init_grpc_channel  # Ray's own: its channel with the cluster's token
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    worker = ray._private.worker.global_worker
    job_env = worker.core_worker.get_job_config().runtime_env_info
    request = node_manager_pb2.PrestartWorkersRequest(
        language=common_pb2.PYTHON,
        job_id=worker.current_job_id.binary(),
        num_workers=count,
        keep_alive_duration_secs=keep_alive_s,
    )
    request.runtime_env_info.serialized_runtime_env = (
        job_env.serialized_runtime_env if serialized_env is None else serialized_env
    )
    request.runtime_env_info.uris.CopyFrom(job_env.uris)  # the job's uploaded modules, as the merge keeps them
    address, port = raylet or (worker.node.node_ip_address, worker.node.node_manager_port)
    with init_grpc_channel(f"{address}:{port}") as channel:
        node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=10)
