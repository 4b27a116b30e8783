"""A local Ray whose workers each see one GPU with --prestart-workers (gridbench.gridsearch.gpu_nodes): the head's
GPU for a search of one, one node per GPU for several with GRIDBENCH_NODE_PER_GPU=1; each node's workers see the one
GPU their trials will get, before they get one."""

from __future__ import annotations

import os
import time

import psutil
import pytest

from gridbench.errors import UserError
from gridbench.gridsearch import gpu_nodes
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
        (1, 8, 4, 0.25, None, GpuNodes(("0",), (8,))),  # one node either way: the cores are not split
        (0, 16, 16, 0.0, None, None),  # a CPU search
    ],
)
def test_each_gpu_gets_a_node_where_its_share_of_the_cores_holds_its_trials(
    gpus, cores, cpus_per_trial, gpus_per_trial, visible, expected
):
    environ = {"GRIDBENCH_NODE_PER_GPU": "1"} | ({} if visible is None else {"CUDA_VISIBLE_DEVICES": visible})
    assert layout(gpus, cores, cpus_per_trial, gpus_per_trial, environ) == expected


@pytest.mark.parametrize("asked", [None, "0"])
def test_several_gpus_keep_one_node_unless_asked_for_one_per_gpu(asked):
    environ = {} if asked is None else {"GRIDBENCH_NODE_PER_GPU": asked}
    assert layout(4, 16, 4, 1.0, environ) is None
    assert layout(1, 16, 16, 1.0, environ) == GpuNodes(("0",), (16,))  # one GPU: the head's, at no node's cost


def test_a_layout_asked_for_in_other_words_is_refused_in_one_line():
    with pytest.raises(UserError) as raised:
        layout(4, 16, 4, 1.0, {"GRIDBENCH_NODE_PER_GPU": "yes"})
    assert str(raised.value) == (
        "GRIDBENCH_NODE_PER_GPU='yes': say 1 (one Ray node per GPU) or 0 (one node), or leave it unset"
    )


def test_nodes_start_at_once_and_one_that_does_not_ends_the_others_and_says_so_in_one_line(monkeypatch):
    """Three starts meet at a barrier (one after another, the first would wait for the others in vain); the one that
    fails is named in one line, those that started are ended, the starting threads end, and Ray's dashboard check,
    answered once to all three, is Ray's own again."""
    import threading

    import ray
    from ray._private import utils

    ended, started, answers = [], [], []
    all_at_once = threading.Barrier(3, timeout=10)

    class Started:
        all_processes: dict = {}

    def start_node(head, index, gpu_id, cpus, log_names):
        all_at_once.wait()
        answers.append(utils.get_dashboard_dependency_error())
        if gpu_id == "2":
            raise RuntimeError("The current node timed out during startup.\nmore of Ray's text")
        started.append(gpu_id)
        return Started()

    stop = gpu_nodes.StartedNodes.stop

    def counted_stop(self):
        ended.append(len(self.nodes))
        stop(self)

    rays_check = utils.get_dashboard_dependency_error
    monkeypatch.setattr(ray._private.worker.global_worker, "node", object(), raising=False)
    monkeypatch.setattr(gpu_nodes, "_start_node", start_node)
    monkeypatch.setattr(gpu_nodes.StartedNodes, "stop", counted_stop)
    with pytest.raises(UserError) as raised:
        gpu_nodes.add_nodes(GpuNodes(("0", "1", "2", "3"), (4, 4, 4, 4)))
    assert sorted(started) == ["1", "3"] and ended == [2]
    assert str(raised.value) == (
        "GRIDBENCH_NODE_PER_GPU=1: Ray's node for a GPU after the first did not start (The current node timed out "
        "during startup.); set GRIDBENCH_NODE_PER_GPU=0 to run the search on one node"
    )
    assert len(answers) == 3 and len({id(answer) for answer in answers}) == 1
    assert utils.get_dashboard_dependency_error is rays_check
    deadline = time.monotonic() + 10
    while _starting_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _starting_threads()


def _starting_threads() -> list:
    import threading

    return [thread for thread in threading.enumerate() if thread.name.startswith("gridbench-gpu-node")]


def test_nodes_started_at_once_take_log_names_no_other_took():
    names = gpu_nodes._LogNames()
    on_disk = iter(["raylet.1.out", "raylet.2.out", "raylet.3.out"])  # what each node's Ray would try next
    assert names.take(lambda: "raylet.1.out") == "raylet.1.out"
    assert names.take(lambda: next(on_disk)) == "raylet.2.out"  # raylet.1.out taken by the first


def test_nodes_started_at_once_get_one_answer_to_rays_dashboard_check(monkeypatch):
    """Asked from several threads at once, Ray's import-based check once found no error where the packages were
    missing, and that node's agent never started: the nodes' starts get the one answer asked before them."""
    import threading

    from ray._private import utils

    asked = []

    def check():
        asked.append(threading.current_thread().name)
        return ImportError("No module named 'aiohttp_cors'")

    monkeypatch.setattr(utils, "get_dashboard_dependency_error", check)
    with gpu_nodes._dashboard_check_once():
        answers = []
        threads = [
            threading.Thread(target=lambda: answers.append(utils.get_dashboard_dependency_error())) for _ in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(asked) == 1 and len(answers) == 8 and len({id(answer) for answer in answers}) == 1
    assert utils.get_dashboard_dependency_error is check  # Ray's own again afterwards


def _raylets() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.name() == "raylet"]


def _ended(processes: list[psutil.Process]) -> bool:
    try:
        return all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in processes)
    except psutil.NoSuchProcess:
        return _ended(processes)  # one ended between the two questions: ask again


def _workers(raylet: psutil.Process) -> set[int]:
    """The Python workers the raylet started (through gridbench's setup script or Ray's)."""
    return {child.pid for child in raylet.children() if any("default_worker.py" in part for part in child.cmdline())}


@pytest.mark.slow
def test_each_nodes_workers_see_its_gpu_before_a_trial_and_are_asked_for_ahead(monkeypatch):
    """Three GPUs Ray believes in (none here): three raylets, the two after the head's started at once, each worker's
    inherited CUDA_VISIBLE_DEVICES naming its node's GPU, a worker asked for ahead of each node, and the nodes'
    raylets ended before Ray's shutdown."""
    import ray

    from gridbench.gridsearch import prestart
    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("GRIDBENCH_NODE_PER_GPU", "1")
    session = RaySession()
    try:
        session.start(SearchOptions(prestart_workers=True), cpus=3, gpus=3, trial_share=(1, 1.0))
        assert len(session.gpu_nodes) == 2 and len([n for n in ray.nodes() if n["Alive"]]) == 3
        raylets = _raylets()
        assert len(raylets) == 3

        @ray.remote(num_cpus=1, num_gpus=1)
        class Sees:
            def before_and_after(self) -> tuple[str, str, int]:
                time.sleep(0.5)  # all held at once: one on each node
                worker = ray._private.worker.global_worker
                before = ",".join(worker.original_visible_accelerator_ids["GPU"])
                return before, os.environ["CUDA_VISIBLE_DEVICES"], os.getpid()

        actors = [Sees.remote() for _ in range(3)]
        seen = ray.get([a.before_and_after.remote() for a in actors], timeout=120)
        assert sorted(s[:2] for s in seen) == [("0", "0"), ("1", "1"), ("2", "2")]
        for actor in actors:
            ray.kill(actor)
        held = [psutil.Process(s[2]) for s in seen if psutil.pid_exists(s[2])]  # the killed actors' workers
        psutil.wait_procs(held, timeout=60)
        prestart.prestart_workers(1)  # the head's raylet
        for address in session.gpu_nodes.raylet_addresses():
            prestart.prestart_workers(1, address)
        deadline = time.monotonic() + 60
        while not all(_workers(r) - {p.pid for p in held} for r in raylets) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(_workers(r) - {p.pid for p in held} for r in raylets)
        logs = set(os.listdir(os.path.join(session.directory.ray_dir, "session_latest", "logs")))
        assert {"raylet.out", "raylet.1.out", "raylet.2.out"} <= logs  # a log of its own for each raylet
        node_raylets = [r for r in raylets if r.pid in session.gpu_nodes.raylet_pids()]
        assert len(node_raylets) == 2
        session.gpu_nodes.stop()  # alone, before the session's end by PID would end them anyway
        assert _ended(node_raylets) and not _ended([r for r in raylets if r not in node_raylets])
    finally:
        session.stop()
    assert _ended(raylets)


@pytest.mark.slow
def test_where_ray_starts_as_ray_init_starts_it_the_search_keeps_one_node_of_every_gpu(monkeypatch):
    """GRIDBENCH_RAY_START=ray: no hook names the head's GPU, so no node is added and the head holds them all."""
    import shutil
    import tempfile

    import ray

    from gridbench.gridsearch import local_ray
    from gridbench.gridsearch.ray_session import _start_ray

    monkeypatch.setenv("GRIDBENCH_RAY_START", "ray")
    ray_dir = tempfile.mkdtemp(prefix="gb-")  # short: Ray's socket paths within it must fit 107 bytes
    try:
        start, nodes = _start_ray(None, 2, 2, ray_dir, None, GpuNodes(("0", "1"), (1, 1)))
        assert start == local_ray.RAY and len(nodes) == 0
        (node,) = [n for n in ray.nodes() if n["Alive"]]
        assert node["Resources"]["GPU"] == 2 and node["Resources"]["CPU"] == 2
    finally:
        ray.shutdown()
        shutil.rmtree(ray_dir, ignore_errors=True)
