"""One trial, run in this process with fake workloads: phases, failures, device checks."""

from __future__ import annotations

import os

import pytest

from gridbench import datasets
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS, Workload

# run_trial configures its (worker) process; this test process gets its environment back.
pytestmark = pytest.mark.usefixtures("kept_environ")


def context_for(session: str, monkeypatch, device: str = "cpu") -> TrialContext:
    base = WORKLOADS["mlp"]
    monkeypatch.setitem(WORKLOADS, session, Workload(session, ("digits",), base.hyperparameters, f"fakes:{session}"))
    params = {hp.name: hp.default for hp in base.hyperparameters} | {"epochs": 4}
    return TrialContext(session, params, datasets.DataSource("digits"), device, "tensorflow", cpus=1, seed=7)


def test_a_trial_times_each_phase_and_keeps_warmup_apart(monkeypatch):
    import fakes

    fakes.FakeSession.prepared_with.clear()
    outcome = run_trial({"hidden_units": 8, "repeat": 1}, context_for("FakeSession", monkeypatch))

    assert outcome.status == "FINISHED", outcome.traceback
    m = outcome.metrics
    assert len(outcome.epoch_times) == 4
    assert m["warmup_epoch_s"] == outcome.epoch_times[0]
    assert m["steady_epochs"] == 3
    assert m["samples_per_s"] == pytest.approx(1347 / m["steady_epoch_s"])  # 75% of 1797 digits
    assert m["test_accuracy"] == 0.75 and m["train_loss"] == 0.5
    assert m["trial_wall_s"] >= m["process_setup_s"] + m["setup_s"] + m["fit_s"] + m["eval_s"]
    assert m["fit_s"] >= sum(outcome.epoch_times)
    assert outcome.repeat == 1
    assert outcome.tags["device.actual"] == "cpu:0" and outcome.tags["backend"] == "fake"
    assert outcome.tags["threads.omp"] == "1"
    assert fakes.FakeSession.prepared_with == [1]


def test_a_cpu_trial_hides_gpus_and_sets_thread_counts_before_the_framework_loads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # what Ray gives its workers
    run_trial({"hidden_units": 8}, context_for("FakeSession", monkeypatch))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "" and os.environ["JAX_PLATFORMS"] == "cpu"
    assert os.environ["KERAS_BACKEND"] == "tensorflow"
    assert os.environ["OMP_NUM_THREADS"] == "1" and os.environ["TF_NUM_INTRAOP_THREADS"] == "1"


def test_a_model_on_the_wrong_device_fails_instead_of_timing(monkeypatch):
    outcome = run_trial({"hidden_units": 8}, context_for("OnTheGpuSession", monkeypatch))
    assert outcome.status == "FAILED"
    assert outcome.error == "DeviceMismatch: requested cpu but tensorflow placed the model on gpu:0"
    assert "steady_epoch_s" not in outcome.metrics
    assert outcome.tags["device.actual"] == "gpu:0"


def test_an_exception_becomes_a_failed_outcome_with_its_traceback(monkeypatch):
    outcome = run_trial({"hidden_units": 8}, context_for("BrokenFitSession", monkeypatch))
    assert outcome.status == "FAILED"
    assert outcome.error == "FloatingPointError: loss is nan at step 3"
    assert "Traceback" in outcome.traceback and "fakes.py" in outcome.traceback
    assert outcome.metrics["trial_wall_s"] > 0 and outcome.ended_at >= outcome.started_at


def test_a_gpu_worker_on_jax_starts_its_backend_once_beside_its_imports_and_a_cpu_worker_never(monkeypatch):
    from dataclasses import replace

    from gridbench.trial import steps

    started = []
    monkeypatch.setattr(steps, "_BACKEND", steps.OnItsThread())
    monkeypatch.setattr(steps.threading.Thread, "start", lambda thread: started.append(thread.name))
    context = TrialContext("digits", {}, datasets.DataSource("digits"), "cpu", "jax", cpus=1, seed=0)
    steps.start_jax_backend_early(context)
    steps.start_jax_backend_early(replace(context, device="gpu", backend="torch"))
    assert started == []
    steps.start_jax_backend_early(replace(context, device="gpu"))
    steps.start_jax_backend_early(replace(context, device="gpu"))  # a later trial in the same worker
    assert started == ["gridbench-jax-backend"]


STARTS_ITS_BACKEND = """
import sys
import jax
compiled = []  # every compilation's backend step, on any thread
BACKEND_STEP = "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_duration_secs_listener(
    lambda event, duration, **_: compiled.append(event) if event == BACKEND_STEP else None
)
from gridbench import datasets
from gridbench.trial import steps
from gridbench.trial.context import TrialContext
cache = sys.argv[1] or None
context = TrialContext("digits", {}, datasets.DataSource("digits"), "gpu", "jax", cpus=1, seed=0,
                       compile_cache_dir=cache)
steps.start_jax_backend_early(context)
steps.backend_started()
print(jax.config.jax_compilation_cache_dir, len(compiled))
"""


def test_a_gpu_worker_s_backend_start_runs_the_evaluation_s_product_from_its_cache_and_none_without_one(tmp_path):
    """The device's thread points JAX at the worker's cache, then runs the product that starts cuBLAS there (here on a
    CPU: the same code), so that later workers read it instead of compiling it; with no cache (--compile-cache off)
    it compiles nothing."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "KERAS_BACKEND": "jax"}
    printed = {}
    for given in (str(cache), ""):
        done = subprocess.run(
            [sys.executable, "-c", STARTS_ITS_BACKEND, given],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        printed[given] = done.stdout.split()
    assert printed == {str(cache): [str(cache), "1"], "": ["None", "0"]}
    # The product alone, in the cache (from host arrays: no program of their own).
    assert sorted(name.split("-")[0] for name in os.listdir(cache) if name.endswith("-cache")) == ["jit_matmul"]


def test_the_worker_s_first_trial_waits_for_its_backend_and_reports_the_start_apart_once(monkeypatch):
    import threading

    from gridbench.tracking import schema
    from gridbench.trial import steps

    release, backend = threading.Event(), steps.OnItsThread()
    starting = backend.thread = threading.Thread(target=lambda: (release.wait(), setattr(backend, "took", 0.75)))
    monkeypatch.setattr(steps, "_BACKEND", backend)
    starting.start()
    threading.Timer(0.2, release.set).start()
    reported = steps.backend_started()
    assert not starting.is_alive()  # it waited for the start to end
    assert reported[schema.DEVICE_START_S] == 0.75  # what the start took on its thread, not the wait
    assert reported[schema.DEVICE_WAIT_S] > 0.0
    assert steps.backend_started() == {}  # a later trial in the same worker: nothing to wait for or report
    monkeypatch.setattr(steps, "_BACKEND", steps.OnItsThread())
    assert steps.backend_started() == {}  # no backend started early (a CPU trial, another framework)


def test_a_worker_s_first_trial_reads_its_data_on_a_thread_and_reports_the_read_once(monkeypatch):
    import threading
    from dataclasses import replace

    from gridbench.tracking import schema
    from gridbench.trial import steps

    release, read = threading.Event(), []
    monkeypatch.setattr(steps, "load_data", lambda context, options: (release.wait(), read.append(options)))
    monkeypatch.setattr(steps, "_DATA", steps.OnItsThread())
    mnist = TrialContext("mlp", {}, datasets.DataSource("mnist", "/data/mnist.npz"), "gpu", "jax", cpus=1, seed=0)
    steps.start_data_read(mnist, {"hidden_units": 8})
    assert steps._DATA.thread.is_alive() and read == []  # reading, while the trial goes on
    threading.Timer(0.2, release.set).start()
    reported = steps.data_read()
    assert read == [{"hidden_units": 8}] and not steps._DATA.thread.is_alive()  # the trial waited for it
    assert reported[schema.DATA_READ_S] > 0 and reported[schema.DATA_WAIT_S] > 0
    steps.start_data_read(mnist, {"hidden_units": 16})  # the worker's next trial: its data are the worker's
    assert steps.data_read() == {} and len(read) == 1
    monkeypatch.setattr(steps, "_DATA", steps.OnItsThread())
    for source in (datasets.DataSource("digits"), datasets.DataSource("imdb", "/data/imdb.npz")):
        steps.start_data_read(replace(mnist, data=source), {})  # their reading imports: read in the setup
    assert steps._DATA.thread is None and steps.data_read() == {}


def test_a_read_that_fails_on_its_thread_reports_nothing_and_leaves_the_failure_to_the_setup(monkeypatch):
    from gridbench.trial import steps

    def broken(context, options):
        raise OSError("no such file")

    monkeypatch.setattr(steps, "load_data", broken)
    monkeypatch.setattr(steps, "_DATA", steps.OnItsThread())
    context = TrialContext("mlp", {}, datasets.DataSource("mnist", synthetic=True), "cpu", "jax", cpus=1, seed=0)
    steps.start_data_read(context, {})
    assert steps.data_read() == {}
