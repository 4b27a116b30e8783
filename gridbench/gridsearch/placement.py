"""Where trials run: GPU shares, the GPUs a search may use, and each backend's memory policy.

A trial asks Ray for `gpus_per_trial` GPUs: a fraction packs several trials on one
GPU (0.25 packs four), a whole number gives each trial that many GPUs. Everything
here is checked before anything starts, and again against the Ray cluster's nodes
before anything is written, because Ray queues a request it cannot meet forever.
Nothing in this module imports a framework. (What a trial does with its share, in its
own process, is gridbench.trial.gpu_memory.)
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from gridbench.errors import UserError

_EPSILON = 1e-9


def check_gpus_per_trial(value: float) -> float:
    """A fraction in (0, 1] or a whole number of GPUs; Ray accepts nothing else."""
    if not (value > 0) or math.isinf(value):
        raise UserError(f"--gpus-per-trial must be > 0, got {value:g}")
    if value > 1 and not float(value).is_integer():
        raise UserError(
            f"--gpus-per-trial {value:g}: above 1 a trial takes whole GPUs; "
            f"use {math.floor(value)} or {math.ceil(value)}"
        )
    return float(value)


def trials_per_gpu(gpus_per_trial: float) -> int:
    """How many trials share one GPU (1 when a trial takes one or more whole GPUs)."""
    return max(1, math.floor(1 / gpus_per_trial + _EPSILON))


def gpu_slots(gpus: int, gpus_per_trial: float) -> int:
    """Trials that can hold a GPU share at once on `gpus` GPUs."""
    if gpus_per_trial >= 1:
        return gpus // int(gpus_per_trial)
    return gpus * trials_per_gpu(gpus_per_trial)


def choose_gpus(requested: int | None, visible: int, gpus_per_trial: float) -> int:
    """The number of GPUs a search uses: `--gpus N` or every visible one, checked."""
    if visible == 0:
        raise UserError("--device gpu: no GPU is visible on this machine (NVML found none); use --device cpu")
    if requested is not None:
        if requested <= 0:
            raise UserError(f"--gpus must be > 0, got {requested}")
        if requested > visible:
            raise UserError(f"--gpus {requested}: this machine has {visible} visible GPU(s); use at most {visible}")
    gpus = requested if requested is not None else visible
    if gpus_per_trial > gpus:
        raise UserError(
            f"--gpus-per-trial {gpus_per_trial:g} is more than the {gpus} GPU(s) this search may use; "
            f"lower it or raise --gpus"
        )
    return gpus


def check_cluster(nodes: Sequence[Mapping[str, Any]], cpus_per_trial: int, gpus_per_trial: float) -> None:
    """Raises a UserError unless some live Ray node can hold one trial.

    `nodes` is ray.nodes(): a trial's CPUs and GPUs must come from one node.
    """
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", True)]
    if any(r.get("CPU", 0) >= cpus_per_trial and r.get("GPU", 0) + _EPSILON >= gpus_per_trial for r in alive):
        return
    largest_gpu = max((r.get("GPU", 0) for r in alive), default=0)
    largest_cpu = max((r.get("CPU", 0) for r in alive), default=0)
    raise UserError(
        f"the Ray cluster cannot place a trial of {cpus_per_trial} CPU(s) and {gpus_per_trial:g} GPU(s): "
        f"its largest node has {largest_cpu:g} CPU(s) and {largest_gpu:g} GPU(s); "
        f"lower --cpus-per-trial/--gpus-per-trial or add nodes"
    )


def check_address_answers(address: str, timeout_s: float = 5.0) -> None:
    """A Ray cluster's HOST:PORT must accept a connection before ray.init joins it.

    ray.init(address=...) to an address where nothing listens retried for minutes,
    printing its C++ client's warnings ("Failed to connect to GCS") on the terminal.
    Other forms (auto, ray://...) are left to Ray.
    """
    import socket

    host, _, port = address.rpartition(":")
    if not host or "/" in address or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise UserError(
            f"--address {address}: nothing answers there ({reason.lower()}); "
            f"start the cluster with `ray start --head --port {port}` or fix --address"
        ) from None
