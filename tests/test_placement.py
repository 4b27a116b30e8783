"""GPU placement without a GPU: shares, slots, cluster checks, memory policy and pinning."""

from __future__ import annotations

import os
import sys

import pytest
from test_trial import context_for

from gridbench import environment
from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, placement, plan_search
from gridbench.spec import load_spec
from gridbench.trial import TrialContext, configure_process, gpu_memory, gpu_monitor, run_trial

pytestmark = pytest.mark.usefixtures("kept_environ")  # configure_process sets variables


@pytest.mark.parametrize("share, per_gpu", [(1, 1), (0.5, 2), (0.25, 4), (0.125, 8), (1 / 3, 3), (0.3, 3), (2, 1)])
def test_trials_per_gpu(share, per_gpu):
    assert placement.trials_per_gpu(share) == per_gpu


@pytest.mark.parametrize("gpus, share, slots", [(1, 1, 1), (1, 0.25, 4), (2, 0.125, 16), (4, 2, 2), (3, 2, 1)])
def test_gpu_slots(gpus, share, slots):
    assert placement.gpu_slots(gpus, share) == slots


@pytest.mark.parametrize(
    "share, message",
    [
        (0, "must be > 0, got 0"),
        (-0.5, "must be > 0, got -0.5"),
        (float("nan"), "must be > 0, got nan"),
        (1.5, "above 1 a trial takes whole GPUs; use 1 or 2"),
    ],
)
def test_impossible_gpu_shares_are_refused(share, message):
    with pytest.raises(UserError, match=message):
        placement.check_gpus_per_trial(share)


def test_gpu_counts_are_checked_against_the_machine():
    assert placement.choose_gpus(None, 4, 0.25) == 4
    assert placement.choose_gpus(2, 4, 2) == 2
    with pytest.raises(UserError, match="no GPU is visible"):
        placement.choose_gpus(None, 0, 1)
    with pytest.raises(UserError, match="--gpus 8: this machine has 4 visible GPU"):
        placement.choose_gpus(8, 4, 1)
    with pytest.raises(UserError, match="--gpus must be > 0"):
        placement.choose_gpus(0, 4, 1)
    with pytest.raises(UserError, match="--gpus-per-trial 2 is more than the 1 GPU"):
        placement.choose_gpus(1, 4, 2)


def _node(cpus, gpus, alive=True):
    return {"Alive": alive, "Resources": {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}}


def test_the_cluster_check_needs_one_node_that_holds_a_whole_trial():
    placement.check_cluster([_node(16, 1)], cpus_per_trial=4, gpus_per_trial=0.25)
    placement.check_cluster([_node(2, 0), _node(8, 2)], cpus_per_trial=4, gpus_per_trial=2)
    placement.check_cluster([_node(2, 0)], cpus_per_trial=2, gpus_per_trial=0)
    # Two GPUs in the cluster, but on different nodes: Ray would wait forever.
    with pytest.raises(UserError, match="largest node has 8 CPU\\(s\\) and 1 GPU\\(s\\)"):
        placement.check_cluster([_node(8, 1), _node(8, 1)], cpus_per_trial=1, gpus_per_trial=2)
    with pytest.raises(UserError, match="cannot place a trial of 1 CPU\\(s\\) and 1 GPU\\(s\\)"):
        placement.check_cluster([_node(16, 0), _node(8, 4, alive=False)], cpus_per_trial=1, gpus_per_trial=1)


def test_each_backend_gets_a_memory_policy_for_its_share():
    assert gpu_memory.memory_fraction(1) == 0.9
    assert gpu_memory.memory_fraction(0.25) == 0.225
    assert gpu_memory.memory_fraction(2) == 0.9  # a share of each of its GPUs, not of two
    # Every JAX trial grows to its cap: preallocating cost each worker's first operation a second.
    assert gpu_memory.memory_environment("jax", 0.125) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.1125",
    }
    assert gpu_memory.memory_environment("jax", 1) == {
        "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
        "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.9",
    }
    assert gpu_memory.memory_environment("tensorflow", 0.5) == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert gpu_memory.memory_environment("torch", 0.5) == {}  # capped after import, in keras_mlp.prepare


def _pretend_gpus(monkeypatch, count, cores=16):
    monkeypatch.setattr(environment, "visible_gpu_count", lambda: count)
    monkeypatch.setattr(environment, "usable_cores", lambda: cores)


def test_a_packed_gpu_search_shares_the_cores_among_its_trials(monkeypatch, mnist_dir, store, fake_probes):
    _pretend_gpus(monkeypatch, 1)
    options = SearchOptions(
        device="gpu", backend="jax", gpus_per_trial=0.25, data_dir=str(mnist_dir), tracking_uri=store
    )
    plan = plan_search(load_spec("mnist"), options)
    assert (plan.gpus, plan.gpus_per_trial, plan.concurrency, plan.cpus_per_trial) == (1, 0.25, 4, 4)
    whole = plan_search(load_spec("mnist"), SearchOptions(device="gpu", backend="jax", data_dir=str(mnist_dir)))
    assert (whole.gpus_per_trial, whole.concurrency, whole.cpus_per_trial) == (1.0, 1, 16)


def test_gpus_limits_the_gpus_a_search_uses(monkeypatch, mnist_dir, fake_probes):
    _pretend_gpus(monkeypatch, 4)
    plan = plan_search(load_spec("mnist"), SearchOptions(device="gpu", backend="jax", gpus=2, data_dir=str(mnist_dir)))
    assert (plan.gpus, plan.concurrency, plan.cpus_per_trial) == (2, 2, 8)
    with pytest.raises(UserError, match="--gpus 5: this machine has 4 visible GPU"):
        plan_search(load_spec("mnist"), SearchOptions(device="gpu", backend="jax", gpus=5, data_dir=str(mnist_dir)))


def test_gpu_flags_on_a_cpu_search_are_refused():
    with pytest.raises(UserError, match="apply to --device gpu only"):
        plan_search(load_spec("digits"), SearchOptions(device="cpu", gpus_per_trial=0.5))


def _gpu_context(backend="jax", share=0.25):
    return TrialContext("mlp", {}, None, "gpu", backend, cpus=4, seed=0, gpus_per_trial=share)


def test_a_gpu_trial_takes_the_gpu_ray_assigned_and_its_memory_share(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")  # what Ray sets for the trial's share
    configure_process(_gpu_context("jax", 0.25))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"  # CUDA's index 2 is NVML's index 2
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.225"
    assert "JAX_PLATFORMS" not in os.environ or os.environ["JAX_PLATFORMS"] != "cpu"
    assert gpu_monitor.assigned_gpu_indices() == [2]


def test_a_gpu_trial_without_an_assigned_gpu_fails_instead_of_running_on_the_cpu(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    context = context_for("FakeSession", monkeypatch, device="gpu")
    outcome = run_trial({"hidden_units": 8}, context)
    assert outcome.status == "FAILED"
    assert outcome.error == (
        "DeviceMismatch: requested gpu but no GPU was assigned to this trial (CUDA_VISIBLE_DEVICES is empty)"
    )


@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_a_cpu_trial_hides_every_gpu_from_every_backend(monkeypatch, backend):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # as if Ray had left the machine's GPU visible
    configure_process(TrialContext("mlp", {}, None, "cpu", backend, cpus=2, seed=0))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["JAX_PLATFORMS"] == "cpu"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION" not in os.environ


def test_gpu_samples_are_summarised_as_mean_and_peak():
    assert gpu_monitor.summarise([50.0, 100.0, 0.0], [1.0, 3.0, 2.0], []) == {
        "gpu_samples": 3.0,
        "gpu_util_pct_mean": 50.0,
        "gpu_util_pct_peak": 100.0,
        "gpu_mem_used_gib_mean": 2.0,
        "gpu_mem_used_gib_peak": 3.0,
    }


class FakeNvml:
    """pynvml's calls that gpu_monitor makes, counted; one GPU of 80 GiB at every index."""

    class NVMLError(Exception):
        pass

    def __init__(self, fail_init: int = 0):
        self.calls = {"init": 0, "shutdown": 0, "name": 0}
        self.fail_init = fail_init  # the first this many nvmlInit calls raise, as on a host without a driver

    def nvmlInit(self):
        self.calls["init"] += 1
        if self.calls["init"] <= self.fail_init:
            raise self.NVMLError("Driver Not Loaded")

    def nvmlShutdown(self):
        self.calls["shutdown"] += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetName(self, handle):
        self.calls["name"] += 1
        return b"Fake GPU"

    def nvmlDeviceGetUUID(self, handle):
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle):
        return type("Memory", (), {"total": 80 * gpu_monitor.GIB, "used": 2 * gpu_monitor.GIB})()

    def nvmlDeviceGetUtilizationRates(self, handle):
        return type("Rates", (), {"gpu": 40})()

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return []


@pytest.fixture
def fake_nvml(monkeypatch):
    def install(**kwargs):
        fake = FakeNvml(**kwargs)
        monkeypatch.setitem(sys.modules, "pynvml", fake)
        return fake

    gpu_monitor.nvml.cache_clear()
    gpu_monitor.describe.cache_clear()
    yield install
    gpu_monitor.nvml.cache_clear()
    gpu_monitor.describe.cache_clear()


def test_a_worker_starts_nvml_once_and_asks_about_its_gpu_once_whatever_the_trials(fake_nvml):
    fake = fake_nvml()
    for _ in range(3):  # three trials in one worker: tags, then sampling while they train
        assert gpu_monitor.describe(1) == {"gpu.name": "Fake GPU", "gpu.uuid": "GPU-1", "gpu.memory_gib": "80.0"}
        with gpu_monitor.GpuSampler(1, interval=60) as sampler:
            pass
        assert sampler.metrics()["gpu_util_pct_mean"] == 40.0
    assert gpu_monitor.memory_held(1) == "GPU 1: 2.0 of 80.0 GiB in use"
    assert fake.calls == {"init": 1, "shutdown": 0, "name": 1}


def test_nvml_that_failed_to_start_is_tried_again_and_an_out_of_memory_line_goes_without_it(fake_nvml):
    fake = fake_nvml(fail_init=1)
    assert gpu_monitor.memory_held(0) is None
    assert gpu_monitor.memory_held(0) == "GPU 0: 2.0 of 80.0 GiB in use"
    assert fake.calls["init"] == 2


@pytest.mark.parametrize("visible, indices", [("0", [0]), ("1,3", [1, 3]), ("", []), (None, [])])
def test_assigned_gpus_are_read_from_cuda_visible_devices(monkeypatch, visible, indices):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_monitor.assigned_gpu_indices() == indices


def test_a_cluster_that_asks_for_a_token_gets_a_line_that_says_how_to_send_it():
    from gridbench.gridsearch.ray_session import cannot_join

    refused = ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379")
    ray_output = "[2026-11-25 04:07:42,617 W 7890 7890] gcs_client.cc:210: Failed to get cluster ID from GCS server: "
    ray_output += "Unauthenticated: RPC error: InvalidAuthToken: Authentication token is missing or incorrect\n"
    line = cannot_join("10.0.0.1:6379", refused, ray_output * 20)
    assert "\n" not in line and "RAY_AUTH_MODE=token" in line and "~/.ray/auth_token" in line
    # Any other failure keeps Ray's own reason.
    other = cannot_join("10.0.0.1:6379", refused, "")
    assert "Failed to connect to Ray cluster" in other and "RAY_AUTH_MODE" not in other
