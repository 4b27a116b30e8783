"""How gridbench starts a local Ray: leaner than ray.init alone, by four steps that ray.init has no argument for,
and two values of Ray's configuration.

- Its raylet starts each Python worker through gridbench.trial.ray_worker_setup, not Ray's setup_worker.py,
  which imports Ray before it execs the worker, which imports Ray again: a worker's start paid twice, on the
  trials' path. ray.init has no argument for the script, but the parameters it builds its node from do
  (RayParams' setup_worker_path).
- No API server. gridbench starts Ray without its dashboard, and then Ray's API server loads only Ray's usage
  statistics module (ray._private.services.start_api_server: `--modules-to-load=UsageStatsHead`), yet ray.init
  waits until that process has started (about 2 s of Ray's start on an H100 host, sampled:
  docs/results/around-training.md). Ray's node is told the server's address is empty, as Ray tells it when
  the dashboard is off, and starts none.
- No autoscaler monitor: a local Ray of a fixed size has nothing to scale (RayParams' no_monitor, as `ray start`
  sets it for the Ray operator on Kubernetes). It is a Python process importing Ray's autoscaler beside the
  search's start, and the last of Ray's processes to end (gridbench ended it first, ray_session._stop_ray).
- ray.init learns that its raylet has registered within 20 ms, not within a second. It waits in
  ray._private.services.get_node, whose GlobalStateAccessor::GetNode asks the GCS once a second; the raylet
  registers once its agents have started, so the answer came up to a second late. gridbench asks the GCS's node
  table every 20 ms first. ray.init then returned a median of 0.286 s after the registration, against 0.829 s, on
  an H100's host of 16 cores (0.089 s against 0.367 s on 2 cores; benchmarks/raylet_waits.py, 8 pairs).
- The raylet retries connecting to its own object store every 50 ms, not every second (Ray's configuration,
  LEAN_SYSTEM_CONFIG). It starts the store in a thread and connects to it at once; where the store was not yet
  listening, it slept a whole second (raylet_client_connect_timeout_milliseconds, the pause between attempts),
  and ray.init waited for it: in 4 of 8 starts on 2 cores, none the lean way (benchmarks/raylet_waits.py). It
  gives up after as long as before (200 x 50 ms).

The first four are private to Ray (2.60 here), so they are applied only where this Ray has them as expected;
otherwise, and with GRIDBENCH_RAY_START=ray, Ray starts as ray.init starts it. A cluster's nodes were started by
`ray start`.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import time
from collections.abc import Iterator

from gridbench.errors import UserError
from gridbench.trial import ray_worker_setup

LEAN = "lean"  # workers started through gridbench.trial.ray_worker_setup, no API server, no autoscaler monitor
RAY = "ray"  # as ray.init starts it: a cluster, GRIDBENCH_RAY_START=ray, or a Ray that lacks what _hooks looks for
CHOICE_ENV = "GRIDBENCH_RAY_START"
# Ray's configuration for a lean start (ray.init's _system_config): the same 10 s of attempts, 50 ms apart.
LEAN_SYSTEM_CONFIG = {"raylet_client_connect_timeout_milliseconds": 50, "raylet_client_num_connect_attempts": 200}
NODE_POLL_S = 0.02  # how often a lean start asks whether its raylet has registered
# After this, Ray's own wait (get_node) takes over: a raylet that never registers fails ray.init up to 10 s later than
# Ray alone would.
NODE_WAIT_S = 10.0


def system_config(start: str) -> dict[str, int]:
    """What a start of kind `start` (LEAN or RAY) adds to Ray's configuration."""
    return dict(LEAN_SYSTEM_CONFIG) if start == LEAN else {}


def choice() -> str:
    """How a local Ray is asked to start, by GRIDBENCH_RAY_START: LEAN (the default) or RAY; raises UserError."""
    asked = os.environ.get(CHOICE_ENV, LEAN)
    if asked not in (LEAN, RAY):
        raise UserError(f"{CHOICE_ENV}={asked!r}: say {LEAN} (the default) or {RAY}, or leave it unset")
    return asked


@contextlib.contextmanager
def lean_start(raylet_env: dict[str, str] | None = None) -> Iterator[str]:
    """While ray.init starts a local Ray (dashboard off), it starts lean where it can; yields LEAN or RAY.

    `raylet_env`: variables for the raylets started meanwhile (their workers inherit them), beneath a node's own
    (gridbench.gridsearch.gpu_nodes); only where it starts lean.
    """
    hooks = _hooks() if choice() == LEAN else None
    if hooks is None:
        yield RAY
        return
    params, node, services, state = hooks
    original_params, original_api_server, original_get_node = params.__init__, node.start_api_server, services.get_node

    def params_init(self, *args, setup_worker_path=None, no_monitor=False, env_vars=None, **kwargs):  # no_monitor: True
        setup_worker_path = setup_worker_path or ray_worker_setup.__file__
        env_vars = {**(raylet_env or {}), **(env_vars or {})} or None
        original_params(self, *args, setup_worker_path=setup_worker_path, no_monitor=True, env_vars=env_vars, **kwargs)

    def no_api_server(self, *, include_dashboard, raise_on_failure):
        if include_dashboard:  # asked for: Ray's own
            return original_api_server(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)
        self._webui_url = ""  # what Ray's start_api_server returns with the dashboard off
        return None

    def get_node(gcs_address, node_id):
        wait_until_registered(state, services._get_gcs_client_options(gcs_address), node_id)
        return original_get_node(gcs_address, node_id)  # at once now; as Ray waits, where the wait ran out

    params.__init__, node.start_api_server, services.get_node = params_init, no_api_server, get_node
    try:
        yield LEAN
    finally:
        params.__init__, node.start_api_server, services.get_node = (
            original_params,
            original_api_server,
            original_get_node,
        )


def wait_until_registered(state_class, gcs_options, node_id: str, timeout_s: float = NODE_WAIT_S) -> bool:
    """Whether the node `node_id` (hex) was alive in the GCS's node table within `timeout_s`, asked every 20 ms.

    `state_class` is Ray's GlobalState, which reads the table without waiting (its get_node waits a second
    between questions).
    """
    state = state_class()
    state._initialize_global_state(gcs_options)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if any(node["NodeID"] == node_id and node["Alive"] for node in state.node_table()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(NODE_POLL_S)
    finally:
        state.disconnect()


def _hooks():
    """Ray's RayParams, Node, services module and GlobalState, where each takes what lean_start gives it; else None."""
    try:
        from ray._private import services  # Ray's own modules: another version may lack them
        from ray._private.node import Node
        from ray._private.parameter import RayParams
        from ray._private.state import GlobalState
    except ImportError:
        return None
    api_server = getattr(Node, "start_api_server", None)
    if api_server is None or not {"setup_worker_path", "no_monitor", "env_vars"} <= set(
        inspect.signature(RayParams.__init__).parameters
    ):
        return None
    if set(inspect.signature(api_server).parameters) != {"self", "include_dashboard", "raise_on_failure"}:
        return None
    if not _reads_node_table(services, GlobalState):
        return None
    return RayParams, Node, services, GlobalState


def _reads_node_table(services, state_class) -> bool:
    """Whether get_node and the node table are as wait_until_registered expects them."""
    get_node = getattr(services, "get_node", None)
    if get_node is None or list(inspect.signature(get_node).parameters) != ["gcs_address", "node_id"]:
        return False
    needed = ("_initialize_global_state", "node_table", "disconnect")
    return hasattr(services, "_get_gcs_client_options") and all(hasattr(state_class, name) for name in needed)
