"""A local Ray whose workers each see one GPU, so that a worker started ahead knows its GPU (--prestart-workers;
issue 40).

Ray names a trial's GPU (CUDA_VISIBLE_DEVICES) only as it hands the trial a worker, and CUDA reads the name once, at
cuInit: a worker that sees several GPUs cannot start its trial's GPU before that trial, and then all GPUs start at
once, each slower (docs/results/around-training.md, "thirteenth").

A search of one GPU on a machine of several has its Ray's raylet (the head's) start with CUDA_VISIBLE_DEVICES naming
that GPU: every worker sees it alone, and Ray's setup hook starts it beside the imports (gridbench.trial.prestart).

A search of several GPUs keeps one node unless GRIDBENCH_NODE_PER_GPU=1 asks for one node per GPU: the head, given the
first GPU, and one more for each other GPU, joining it as ray.cluster_utils adds nodes (Ray's Node), each with its share
of the cores, all at once. Every worker's first trial then lost its GPU's start, but on 4 H200s the 4-GPU command took
2.0 s longer than on one node, with a makespan no shorter, so it is not the default (docs/results/around-training.md,
"fifteenth").
"""

from __future__ import annotations

import contextlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from gridbench.errors import UserError
from gridbench.gridsearch import placement

NODE_PER_GPU_ENV = "GRIDBENCH_NODE_PER_GPU"  # "1": one Ray node per GPU on several GPUs; "0": one node
# Unset: one node (docs/results/around-training.md, "fifteenth").
NODE_PER_GPU_DEFAULT = False
# The object store of each node after the head, which holds only what its workers put: a trial's results go to the
# driver. Ray's default (30% of the memory for each node) would promise /dev/shm several times over.
NODE_OBJECT_STORE_BYTES = 512 * 1024**2


@dataclass(frozen=True)
class GpuNodes:
    """A node per GPU, the head's first (alone for a search of one GPU): the GPUs' names, as CUDA_VISIBLE_DEVICES
    gives them, and each node's cores."""

    gpu_ids: tuple[str, ...]
    cpus: tuple[int, ...]

    @property
    def head_env(self) -> dict[str, str]:
        return {"CUDA_VISIBLE_DEVICES": self.gpu_ids[0]}


def layout(gpus: int, cores: int, cpus_per_trial: int, gpus_per_trial: float, environ=os.environ) -> GpuNodes | None:
    """The head's GPU for a local search of one GPU whose workers start ahead, and one node per GPU for several where
    GRIDBENCH_NODE_PER_GPU=1; None where Ray keeps one node that sees every GPU.

    None too where a trial takes several GPUs (they must share a node), or where a node's share of the cores cannot
    hold the trials that share its GPU: one node holds them all then, as before.
    """
    if gpus < 1 or gpus_per_trial > 1 or (gpus > 1 and not node_per_gpu(environ)):
        return None
    share = cores // gpus
    if gpus > 1 and share < cpus_per_trial * placement.trials_per_gpu(gpus_per_trial):
        return None  # a node's cores could not hold its GPU's trials: one node holds them all, as before
    ids = _visible_ids(environ)
    if ids is not None and len(ids) < gpus:
        return None  # Ray's own check refuses it with its message
    names = tuple(ids[:gpus]) if ids is not None else tuple(str(i) for i in range(gpus))
    return GpuNodes(gpu_ids=names, cpus=(cores - share * (gpus - 1),) + (share,) * (gpus - 1))


def node_per_gpu(environ=os.environ) -> bool:
    """Whether a search of several GPUs asks for one Ray node per GPU (GRIDBENCH_NODE_PER_GPU, else the default)."""
    asked = environ.get(NODE_PER_GPU_ENV, "")
    if asked not in ("", "0", "1"):
        raise UserError(
            f"{NODE_PER_GPU_ENV}={asked!r}: say 1 (one Ray node per GPU) or 0 (one node), or leave it unset"
        )
    return asked == "1" if asked else NODE_PER_GPU_DEFAULT


def _visible_ids(environ) -> list[str] | None:
    """The GPUs CUDA_VISIBLE_DEVICES names in the driver, as Ray reads them; None where it is unset."""
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [name.strip() for name in visible.split(",") if name.strip()]


class StartedNodes:
    """The nodes started after the head, and the threads that started them, which live as long as they do: Ray
    ties each raylet to the thread that started it (Linux's parent-death signal), so a thread's end would end it."""

    def __init__(self, nodes: list, threads: ThreadPoolExecutor | None = None):
        self.nodes = nodes
        self._threads = threads

    def __len__(self) -> int:
        return len(self.nodes)

    def raylet_addresses(self) -> list[tuple[str, int]]:
        """Where each node's raylet listens, for the workers asked of it ahead (gridbench.gridsearch.prestart)."""
        return [(node.node_ip_address, node.node_manager_port) for node in self.nodes]

    def raylet_pids(self) -> list[int]:
        from ray._private import ray_constants  # Ray's own: the name Node files its raylet under

        return [
            info.process.pid
            for node in self.nodes
            for info in node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
        ]

    def stop(self, grace_s: float = 2.0) -> None:
        """Ends the nodes before Ray's shutdown ends the head: each raylet at once, by SIGTERM, which ends its
        workers and agents as ray.shutdown ends the head's.

        Left to the search's end of its processes by PID (SIGTERM to every process at once, then SIGKILL 3 s later),
        four nodes took 6.04 s to end on 4 H200s, against 0.46 s for one node; two took 5.45-6.17 s on 2 cores,
        against 0.39-0.42 s this way (benchmarks/gpu_nodes_stop.py; docs/results/around-training.md, "fourteenth").
        """
        if self.nodes:  # none: no import of Ray, so a search refused before Ray started stops its session too
            self._end_raylets(grace_s)
        if self._threads is not None:
            # A node that failed to register is ended here: its raylet dies with the thread that started it.
            self._threads.shutdown(wait=False)
        self.nodes, self._threads = [], None

    def _end_raylets(self, grace_s: float) -> None:
        import psutil

        raylets = []
        for pid in self.raylet_pids():
            with contextlib.suppress(psutil.Error):
                raylets.append(psutil.Process(pid))
                raylets[-1].terminate()
        _, still = psutil.wait_procs(raylets, timeout=grace_s)
        for raylet in still:
            with contextlib.suppress(psutil.Error):
                raylet.kill()


NO_NODES = StartedNodes([])


def add_nodes(nodes: GpuNodes) -> StartedNodes:
    """Starts the nodes after the head (ray.init's, already up), one per remaining GPU, all at once, each from a
    thread that lives as long as its node; returns once every raylet has registered.

    Call it inside local_ray.lean_start: the nodes' workers then start as the head's do.
    """
    import ray

    head = ray._private.worker.global_worker.node
    node_specs = list(enumerate(zip(nodes.gpu_ids[1:], nodes.cpus[1:]), start=1))
    if not node_specs:
        return NO_NODES
    log_names = _LogNames()
    with _dashboard_check_once():
        start_pool = ThreadPoolExecutor(max_workers=len(node_specs), thread_name_prefix="gridbench-gpu-node")
        starts = [
            start_pool.submit(_start_node, head, index, gpu_id, cpus, log_names) for index, (gpu_id, cpus) in node_specs
        ]
        started = _once_all_ended(starts, start_pool)
    failed = next((start.exception() for start in starts if start.exception() is not None), None)
    if failed is not None:
        started.stop()
        first = str(failed).splitlines()[0] if str(failed) else type(failed).__name__
        raise UserError(
            f"{NODE_PER_GPU_ENV}=1: Ray's node for a GPU after the first did not start ({first}); "
            f"set {NODE_PER_GPU_ENV}=0 to run the search on one node"
        )
    return started


def _once_all_ended(starts: list, start_pool: ThreadPoolExecutor) -> StartedNodes:
    """The nodes whose start succeeded, once every start has ended. Interrupted (a signal, Ctrl-C), it still waits for
    them, a second or two, and ends those that started before the interrupt goes on: none is left unknown."""
    try:
        wait(starts)
    except BaseException:
        wait(starts)
        StartedNodes([start.result() for start in starts if start.exception() is None], start_pool).stop()
        raise
    return StartedNodes([start.result() for start in starts if start.exception() is None], start_pool)


class _LogNames:
    """The log files' names taken by the nodes starting at once. Ray's Node numbers a node's files by those it finds
    on disk, so nodes started together took the same (one raylet.1.out for two raylets) and wrote into each other's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._taken: set[str] = set()

    def take(self, next_name) -> str:
        """The first of `next_name()`'s names that no other node took."""
        with self._lock:
            name = next_name()
            while name in self._taken:
                name = next_name()
            self._taken.add(name)
            return name


@contextlib.contextmanager
def _dashboard_check_once():
    """While nodes start at once: Ray's check for its dashboard's packages answered once, for every node.

    Each node's start asks it by importing them. Where they are missing, two threads importing at once could find no
    error, and that node's dashboard agent then started without --minimal, failed on the import and never wrote its
    ports: its raylet timed out before it registered (seen on 4 H200s and on 2 cores; docs/results/around-training.md,
    "fifteenth").
    """
    from ray._private import utils  # Ray's own: services.start_raylet asks it, through the module

    check = getattr(utils, "get_dashboard_dependency_error", None)
    if check is None:
        yield
        return
    answer = check()
    utils.get_dashboard_dependency_error = lambda: answer
    try:
        yield
    finally:
        utils.get_dashboard_dependency_error = check


def _start_node(head, index: int, gpu_id: str, cpus: int, log_names: _LogNames):
    from ray._private.node import Node  # Ray's own, as ray.cluster_utils uses it: no public way to add a node
    from ray._private.parameter import RayParams

    class NodeOfItsOwnLogs(Node):
        def _make_inc_temp(self, *args, **kwargs):  # Ray's own, which names its log files
            return log_names.take(lambda: Node._make_inc_temp(self, *args, **kwargs))

    suffix = f".{index}"  # socket files of its own, as short as Ray's own numbering: the paths must fit 107 bytes
    params = RayParams(
        gcs_address=head.gcs_address,
        node_ip_address=head.node_ip_address,
        num_cpus=cpus,
        num_gpus=1,
        env_vars={"CUDA_VISIBLE_DEVICES": gpu_id},
        object_store_memory=NODE_OBJECT_STORE_BYTES,
        include_log_monitor=False,  # the head's watches the session's logs, every node's
        node_manager_port=0,
        min_worker_port=0,
        max_worker_port=0,
        plasma_store_socket_name=head.plasma_store_socket_name + suffix,
        raylet_socket_name=head.raylet_socket_name + suffix,
    )
    params.dashboard_agent_listen_port = None  # a port of its own, not the head agent's
    return NodeOfItsOwnLogs(params, head=False, shutdown_at_exit=False, spawn_reaper=True)
