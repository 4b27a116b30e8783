"""How gridbench starts a local Ray: leaner than ray.init alone, by three steps that ray.init has no argument for.

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

All three are private to Ray (2.60 here), so they are applied only where this Ray has them as expected; otherwise, and
with GRIDBENCH_RAY_START=ray, Ray starts as ray.init starts it. A cluster's nodes were started by `ray start`.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator

from gridbench.errors import UserError
from gridbench.trial import ray_worker_setup

LEAN = "lean"  # workers started through gridbench.trial.ray_worker_setup, no API server, no autoscaler monitor
RAY = "ray"  # as ray.init starts it: a cluster, GRIDBENCH_RAY_START=ray, or a Ray that lacks what _hooks looks for
CHOICE_ENV = "GRIDBENCH_RAY_START"


@contextlib.contextmanager
def lean_start() -> Iterator[str]:
    """While ray.init starts a local Ray (dashboard off), it starts lean where it can; yields LEAN or RAY."""
    choice = os.environ.get(CHOICE_ENV, LEAN)
    if choice not in (LEAN, RAY):
        raise UserError(f"{CHOICE_ENV}={choice!r}: say {LEAN} (the default) or {RAY}, or leave it unset")
    hooks = _hooks() if choice == LEAN else None
    if hooks is None:
        yield RAY
        return
    params, node = hooks
    original_params, original_api_server = params.__init__, node.start_api_server

    def params_init(self, *args, setup_worker_path=None, no_monitor=False, **kwargs):  # no_monitor: always True
        setup_worker_path = setup_worker_path or ray_worker_setup.__file__
        original_params(self, *args, setup_worker_path=setup_worker_path, no_monitor=True, **kwargs)

    def no_api_server(self, *, include_dashboard, raise_on_failure):
        if include_dashboard:  # asked for: Ray's own
            return original_api_server(self, include_dashboard=include_dashboard, raise_on_failure=raise_on_failure)
        self._webui_url = ""  # what Ray's start_api_server returns with the dashboard off
        return None

    params.__init__, node.start_api_server = params_init, no_api_server
    try:
        yield LEAN
    finally:
        params.__init__, node.start_api_server = original_params, original_api_server


def _hooks():
    """Ray's RayParams and Node classes, where both take what lean_start gives them; else None."""
    try:
        from ray._private.node import Node  # Ray's own modules: another version may lack them
        from ray._private.parameter import RayParams
    except ImportError:
        return None
    api_server = getattr(Node, "start_api_server", None)
    if api_server is None or not {"setup_worker_path", "no_monitor"} <= set(
        inspect.signature(RayParams.__init__).parameters
    ):
        return None
    if set(inspect.signature(api_server).parameters) != {"self", "include_dashboard", "raise_on_failure"}:
        return None
    return RayParams, Node
