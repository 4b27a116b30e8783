"""Which script a local Ray's raylet starts its Python workers with: gridbench's, or Ray's own.

Ray's setup_worker.py imports Ray before it execs each worker, which imports Ray again; on the
trials' path that is a worker's start paid twice (gridbench.trial.ray_worker_setup says what the
replacement does, and hands to Ray's script). ray.init has no argument for the script, but the
parameters it builds its node from do (RayParams' setup_worker_path); this sets it while ray.init
starts a local Ray. A cluster's nodes were started by `ray start`, with Ray's.

GRIDBENCH_RAY_WORKER_SETUP=ray keeps Ray's script: for a runtime_env that gridbench's misreads, and
for measuring the difference.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator

from gridbench.trial import ray_worker_setup

GRIDBENCH = "gridbench"  # the raylet starts workers through gridbench.trial.ray_worker_setup
RAY = "ray"  # through Ray's own setup_worker.py: a cluster, the variable above, or a Ray without the parameter
CHOICE_ENV = "GRIDBENCH_RAY_WORKER_SETUP"


@contextlib.contextmanager
def local_ray_workers() -> Iterator[str]:
    """While ray.init starts a local Ray, its raylet gets gridbench's setup script; yields which one it gets."""
    params = _ray_params_class() if os.environ.get(CHOICE_ENV, GRIDBENCH) != RAY else None
    if params is None:
        yield RAY
        return
    original = params.__init__

    def init(self, *args, setup_worker_path=None, **kwargs):
        original(self, *args, setup_worker_path=setup_worker_path or ray_worker_setup.__file__, **kwargs)

    params.__init__ = init
    try:
        yield GRIDBENCH
    finally:
        params.__init__ = original


def _ray_params_class():
    try:
        from ray._private.parameter import RayParams  # Ray's own module: another version may lack it
    except ImportError:
        return None
    return RayParams if "setup_worker_path" in inspect.signature(RayParams.__init__).parameters else None
