"""On a real GPU: packed trials, pinned devices both ways, NVML facts in MLflow.

Run on a lent GPU machine (see README, "GPU runs"); skipped where no GPU is visible.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from test_search import runs_of

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def search(store, *args):
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", store, *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return runs_of(store, "digits")


def needs(backend):
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")


def test_four_jax_trials_share_one_gpu_within_their_memory_shares(store):
    """With JAX's default policy (75% of the GPU per process) the second trial would run out of memory."""
    needs("jax")
    _, (parent,), children = search(
        store, "--device", "gpu", "--backend", "jax", "--gpus", "1", "--gpus-per-trial", "0.25"
    )
    assert parent.data.tags["gpus_per_trial"] == "0.25" and parent.data.tags["trials_per_gpu"] == "4"
    assert parent.data.metrics["concurrency"] == 4 and parent.data.metrics["trials_finished"] == 4
    assert parent.data.tags["gpu.0.name"] and parent.data.tags["gpu.0.driver"] and parent.data.tags["gpu.0.cuda_driver"]
    assert len(children) == 4
    for child in children:
        tags, metrics = child.data.tags, child.data.metrics
        assert child.info.status == "FINISHED"
        assert tags["device.actual"] == "gpu:0" and tags["gpu.assigned"] == "0"
        assert tags["gpu.name"] == parent.data.tags["gpu.0.name"] and tags["gpu.uuid"].startswith("GPU-")
        assert tags["train_loop"] == "compiled" and tags["jax.platform"] == "gpu"
        assert metrics["gpu_samples"] >= 1 and 0 <= metrics["gpu_util_pct_peak"] <= 100
        assert 0 < metrics["gpu_mem_used_gib_peak"] <= float(tags["gpu.memory_gib"])
    # Packed means concurrent: every trial overlaps another in time.
    spans = sorted((c.info.start_time, c.info.end_time) for c in children)
    assert any(later[0] < earlier[1] for earlier, later in zip(spans, spans[1:]))


def test_torch_trials_pack_on_one_gpu_with_keras_fit(store):
    needs("torch")
    _, (parent,), children = search(
        store, "--device", "gpu", "--backend", "torch", "--gpus", "1", "--gpus-per-trial", "0.5"
    )  # one GPU, on a machine of several too
    assert parent.data.metrics["trials_finished"] == 4 and parent.data.metrics["concurrency"] == 2
    for child in children:
        assert child.data.tags["device.actual"] == "gpu:0" and child.data.tags["train_loop"] == "fit"
        assert child.data.tags["version.torch_cuda"] not in ("", "None")


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_cpu_trials_stay_off_the_gpu_they_can_see(store, backend):
    """Ray does not hide the GPU from a trial that asked for none; gridbench must."""
    needs(backend)
    _, (parent,), children = search(store, "--device", "cpu", "--backend", backend, "--cpus-per-trial", "4")
    assert parent.data.tags["gpu.count"] != "0"  # the GPU was there to be (wrongly) used
    assert len(children) == 4
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["device.actual"] == "cpu:0"
        assert "gpu_samples" not in child.data.metrics


@pytest.mark.parametrize("experiment", ["digits", "kernels-digits"])
def test_a_gpu_search_needs_no_backend_named(store, experiment):
    """The headline command as a new user types it: no --backend, no KERAS_BACKEND."""
    from gridbench.gridsearch import backends

    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", experiment, "--device", "gpu", "--tracking-uri", store],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    _, (parent,), children = runs_of(store, experiment)
    if experiment == "digits":
        expected = next(b for b in backends.GPU_ORDER if backends.installed(b) and backends.probe(b).sees_gpu)
        assert f"backend {expected}: the first installed backend that sees a GPU" in result.stdout
        assert parent.data.tags["backend"] == expected and parent.data.metrics["backend_probe_s"] > 0
        assert parent.data.tags["backend.reason"].startswith("the first installed backend that sees a GPU")
    else:
        assert parent.data.tags["backend"] == "numpy/cupy"
    assert children and all(c.data.tags["device.actual"] == "gpu:0" for c in children)
    assert all(c.info.status == "FINISHED" for c in children)


@pytest.mark.parametrize("gpus", [1, 2])
def test_with_workers_ahead_each_gpu_has_its_node_and_every_worker_starts_its_gpu_in_its_hook(store, gpus, monkeypatch):
    """On a machine of several GPUs (gridbench.gridsearch.gpu_nodes): each worker of `gpus` nodes (one per GPU, asked
    for where several) sees its node's GPU only, so every worker's hook starts it, and no trial does."""
    needs("jax")
    from gridbench.environment import visible_gpu_count

    if visible_gpu_count() < max(gpus, 2):
        pytest.skip(f"needs {max(gpus, 2)} visible GPUs: one node per GPU matters where a worker sees several")
    if gpus > 1:
        monkeypatch.setenv("GRIDBENCH_NODE_PER_GPU", "1")  # the search's subprocess inherits it; one GPU needs none
    _, (parent,), children = search(
        store, "--device", "gpu", "--backend", "jax", "--gpus", str(gpus), "--prestart-workers"
    )
    assert parent.data.tags["ray.nodes"] == str(gpus) and parent.data.metrics["workers_prestarted"] == gpus
    firsts = [c for c in children if "worker.device_start_ahead_s" in c.data.metrics]
    assert len(firsts) == gpus  # every worker's first trial reports the start its hook made
    assert len({c.data.tags["gpu.assigned"] for c in firsts}) == gpus
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["jax.platform"] == "gpu"
        assert "device_start_s" not in child.data.metrics  # no trial started the device itself


def test_a_worker_started_ahead_that_sees_one_gpu_starts_it_in_its_hook(store):
    """With --prestart-workers, the one GPU a worker sees is its trials': the worker starts it in Ray's setup hook."""
    needs("jax")
    first_gpu = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0]
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", store, "--device", "gpu",
         "--backend", "jax", "--prestart-workers"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "CUDA_VISIBLE_DEVICES": first_gpu},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    _, (parent,), children = runs_of(store, "digits")
    assert parent.data.tags["prestart_workers"] == "on" and parent.data.metrics["workers_prestarted"] == 1
    firsts = [c for c in children if "worker.device_start_ahead_s" in c.data.metrics]
    assert len(firsts) == 1  # the one worker's first trial reports the start its hook made
    first = firsts[0].data.metrics
    assert 0 < first["worker.device_start_ahead_s"] <= first["worker.import_ahead_s"]
    for child in children:
        assert child.info.status == "FINISHED" and child.data.tags["device.actual"] == "gpu:0"
        assert child.data.tags["gpu.assigned"] == first_gpu and child.data.tags["jax.platform"] == "gpu"
        assert "device_start_s" not in child.data.metrics  # no trial started the device itself
