"""A local Ray whose workers each see one GPU with --prestart-workers (gridbench.gridsearch.gpu_nodes): the head's
GPU for a search of one, one node per GPU for several with GRIDBENCH_NODE_PER_GPU=1; each node's workers see the one
GPU their trials will get, before they get one."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from gridbench.gridsearch.gpu_nodes import GpuNodes, layout
from gridbench.gridsearch.options import SearchOptions


@pytest.mark.parametrize(
    ("gpus", "cores", "cpus_per_trial", "gpus_per_trial", "visible", "expected"),
    [
        (4, 16, 4, 1.0, None, GpuNodes(("0", "1", "2", "3"), (4, 4, 4, 4))),
        (4, 18, 4, 1.0, None, GpuNodes(("0", "1", "2", "3"), (6, 4, 4, 4))),  # the rest of the cores on the head
        (2, 16, 2, 0.25, None, GpuNodes(("0", "1"), (8, 8))),  # four trials a GPU, 2 cores each
        (2, 16, 3, 0.25, None, None),  # 12 cores a GPU needed, 8 a node: one node holds them, as before
        (2, 16, 8, 2.0, None, None),  # a trial of two GPUs needs them on one node
        (2, 16, 8, 1.0, "5,7,1", GpuNodes(("5", "7"), (8, 8))),  # the first GPUs the driver sees, by its names
        (2, 16, 8, 1.0, "GPU-a", None),  # fewer named than asked: Ray's own check refuses it
        (1, 16, 16, 1.0, None, GpuNodes(("0",), (16,))),  # the head alone, its workers seeing GPU 0 only
        (0, 16, 16, 0.0, None, None),  # a CPU search
    ],
)
def test_each_gpu_gets_a_node_where_its_share_of_the_cores_holds_its_trials(
    gpus, cores, cpus_per_trial, gpus_per_trial, visible, expected
):
    environ = {"GRIDBENCH_NODE_PER_GPU": "1"} | ({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    assert layout(gpus, cores, cpus_per_trial, gpus_per_trial, environ) == expected


@pytest.mark.parametrize("asked", [None, "0", "yes"])
def test_several_gpus_keep_one_node_unless_asked_for_one_per_gpu(asked):
    environ = {} if asked is None else {"GRIDBENCH_NODE_PER_GPU": asked}
    assert layout(4, 16, 4, 1.0, environ) is None
    assert layout(1, 16, 16, 1.0, environ) == GpuNodes(("0",), (16,))  # one GPU: the head's, at no node's cost


def _idle_workers(raylet_pid: int) -> int:
    """Python workers the raylet started (through gridbench's setup script or Ray's)."""
    children = psutil.Process(raylet_pid).children()
    return sum(any("default_worker.py" in part for part in child.cmdline()) for child in children)


@pytest.mark.slow
def test_each_nodes_workers_see_its_gpu_before_a_trial_and_are_asked_for_ahead(monkeypatch):
    """Two GPUs Ray believes in (none here): two raylets, each worker's inherited CUDA_VISIBLE_DEVICES naming its
    node's GPU, the workers asked for ahead started on both, and every raylet ended with the session."""
    import ray

    from gridbench.gridsearch import prestart
    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("GRIDBENCH_NODE_PER_GPU", "1")
    session = RaySession()
    try:
        session.start(SearchOptions(prestart_workers=True), cpus=2, gpus=2, trial_share=(1, 1.0))
        assert len(session.gpu_nodes) == 1 and len([n for n in ray.nodes() if n["Alive"]]) == 2
        raylets = [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]
        assert len(raylets) == 2

        @ray.remote(num_cpus=1, num_gpus=1)
        class Sees:
            def before_and_after(self) -> tuple[str, str]:
                time.sleep(0.5)  # both held at once: one on each node
                worker = ray._private.worker.global_worker
                return ",".join(worker.original_visible_accelerator_ids["GPU"]), os.environ["CUDA_VISIBLE_DEVICES"]

        actors = [Sees.remote() for _ in range(2)]
        assert sorted(ray.get([a.before_and_after.remote() for a in actors], timeout=120)) == [
            ("0", "0"),
            ("1", "1"),
        ]
        for actor in actors:
            ray.kill(actor)
        prestart.prestart_workers(1, session.gpu_nodes.raylet_addresses())
        deadline = time.monotonic() + 60
        while not all(_idle_workers(r.pid) for r in raylets) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_idle_workers(r.pid) for r in raylets)
    finally:
        session.stop()
    assert not [r for r in raylets if r.is_running() and r.status() != psutil.STATUS_ZOMBIE]
