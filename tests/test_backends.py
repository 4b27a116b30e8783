"""Keras on each backend: searches on JAX and PyTorch (TensorFlow's elsewhere), each recorded as such; the JAX search
reads the real MNIST file."""

from __future__ import annotations

import importlib.util
import os
import re
import signal

import pytest
from stores import new_store
from test_search import runs_of

import gridbench
from gridbench import environment
from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, backends, plan_pair, plan_search
from gridbench.spec import load_spec
from gridbench.tracking import experiment_name


def _handlers() -> dict:
    return {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}


@pytest.fixture(scope="module")
def jax_mnist_search(tmp_path_factory, mnist_dir) -> dict:
    """One search of the real MNIST on JAX through the Python API, in this test process (whose MLflow and Ray are
    imported already), read by two tests: the backend it records (test_search_on_another_backend_records_it[jax])
    and the file it reads and the process it gives back (test_mnist_search_reads_the_real_file). With a search each,
    test_backends.py and test_search.py took 110.7 CPU s (pytest -n 0 on each, 2 cores), with this one 98.1."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed (pip install -e '.[jax]')")
    store = new_store(tmp_path_factory.mktemp("jax-mnist"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GRIDBENCH_DATA_DIR", str(mnist_dir))
        environ, handlers = dict(os.environ), _handlers()
        gridbench.search(
            "mnist",
            params={"epochs": 2, "hidden_units": 64, "batch_size": 512},
            grid={"learning_rate": [0.001]},
            backend="jax",
            tracking_uri=store,
        )
        given_back = {"environ": dict(os.environ) == environ, "handlers": _handlers() == handlers}
    return {"store": store, "given_back": given_back, "data_path": str((mnist_dir / "mnist.npz").resolve())}


def _search_on(backend: str, tmp_path, request) -> tuple[str, str]:
    """The store and experiment of a search on `backend`: JAX's is the shared MNIST search, PyTorch's one of its own
    on digits (batches of 128, 12 steps an epoch: Keras on PyTorch took 0.15 s a step on CI's two shared cores)."""
    if backend == "jax":
        return request.getfixturevalue("jax_mnist_search")["store"], "mnist"
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed (pip install -e '.[{backend}]')")
    store = new_store(tmp_path)
    # Through the Python API, in this test process, whose MLflow and Ray are imported already.
    gridbench.search(
        "digits",
        params={"hidden_units": 32, "epochs": 2, "batch_size": 128},
        grid={"learning_rate": [0.01]},
        backend=backend,
        tracking_uri=store,
    )
    return store, "digits"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_search_on_another_backend_records_it(tmp_path, backend, request):
    store, experiment = _search_on(backend, tmp_path, request)

    from mlflow import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name(experiment)).experiment_id])
    (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert parent.data.tags["backend"] == backend
    assert child.data.tags["backend"] == backend  # read back from Keras in the worker
    assert child.data.tags["device.actual"] == "cpu:0"
    assert child.data.metrics["test_accuracy"] > 0.5
    # train_loop=auto, resolved: fit on a CPU whatever the backend (the compiled loop is the GPU's).
    assert child.data.params["train_loop"] == "fit" and child.data.tags["train_loop"] == "fit"
    assert child.data.tags["compile_cache"] == parent.data.tags["compile_cache"]
    # Kept across searches by default (gridbench.compile_cache), where the backend compiles with JAX.
    assert parent.data.tags["compile_cache"] == ("persistent" if backend == "jax" else "off")
    if backend == "torch":
        assert child.data.tags["threads.torch"] == parent.data.tags["cpus_per_trial"]


@pytest.mark.slow
def test_mnist_search_reads_the_real_file(jax_mnist_search):
    # The caller's process as it was: Ray's, Tune's and MLflow's variables and the search's stop handlers gone.
    assert jax_mnist_search["given_back"] == {"environ": True, "handlers": True}
    _, parents, children = runs_of(jax_mnist_search["store"], "mnist")
    assert parents[0].data.tags["data.path"] == jax_mnist_search["data_path"]
    assert len(children) == 1
    m = children[0].data.metrics
    assert m["test_accuracy"] > 0.85
    assert m["samples_per_s"] == pytest.approx(60000 / m["steady_epoch_s"])


def test_a_backend_that_is_not_installed_is_a_user_error(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "jax" else real_find_spec(name))
    with pytest.raises(UserError, match=r"backend jax is not installed \(pip install 'gridbench\[jax\]'\)"):
        plan_search(load_spec("digits"), SearchOptions(backend="jax"))


@pytest.mark.parametrize(
    ("spec", "backend", "message"),
    [
        (
            load_spec("digits").with_overrides({"train_loop": "compiled"}),
            "torch",
            "train_loop=compiled needs --backend jax",
        ),
        (load_spec("digits").with_execution("fused"), None, "--execution fused needs --backend jax"),
    ],
)
def test_what_a_known_backend_cannot_run_is_refused_before_ray_starts(monkeypatch, spec, backend, message):
    """Named, or a CPU search's default: the backend needs no probe, so its refusals come before Ray's start."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    started = []
    with pytest.raises(UserError, match=re.escape(message)):
        plan_search(spec, SearchOptions(backend=backend), while_probing=lambda *args: started.append(args))
    assert started == []


# --- Which backend a search takes when none is named ---------------------------------------------------------


def _everything_installed(backend):
    return True


def test_a_gpu_search_takes_jax_when_jax_sees_the_gpu(fake_probes):
    choice = backends.choose("gpu", None, is_installed=_everything_installed)
    assert choice.backend == "jax" and fake_probes.asked == ["jax"]  # the first that sees it: no more asked
    assert choice.reason == (
        "the first installed backend that sees a GPU (jax, torch, tensorflow): "
        "jax sees 1 GPU (Fake GPU; asked in 0.5 s)"
    )
    assert choice.probe_s == 0.5


def test_a_gpu_search_takes_torch_when_only_torch_sees_the_gpu(fake_probes):
    fake_probes.seeing = {"torch"}
    choice = backends.choose("gpu", None, is_installed=_everything_installed)
    assert choice.backend == "torch" and fake_probes.asked == ["jax", "torch"]
    assert choice.reason.endswith("torch sees 1 GPU (Fake GPU; asked in 0.5 s); jax: sees no GPU")
    assert choice.probe_s == 1.0  # both probes' time


def test_backends_that_are_not_installed_are_not_asked(fake_probes):
    fake_probes.seeing = {"tensorflow"}
    choice = backends.choose("gpu", None, is_installed=lambda backend: backend == "tensorflow")
    assert choice.backend == "tensorflow" and fake_probes.asked == ["tensorflow"]


def test_no_backend_that_sees_the_gpu_names_the_extra_for_the_driver(fake_probes):
    fake_probes.seeing, fake_probes.cpu_only = set(), {"jax", "tensorflow"}
    with pytest.raises(UserError) as raised:
        backends.choose("gpu", None, cuda_major=12, is_installed=_everything_installed)
    assert str(raised.value) == (
        "--device gpu: no installed Keras backend can use the GPU (jax: a CPU-only build; torch: sees no GPU; "
        "tensorflow: a CPU-only build); install JAX's CUDA build: pip install 'gridbench[cuda12]'"
    )


def test_tensorflow_cpu_alone_is_refused_before_anything_runs(fake_probes):
    """The README's base install: tensorflow-cpu is the only backend."""
    fake_probes.seeing, fake_probes.cpu_only = set(), {"tensorflow"}
    with pytest.raises(UserError, match=r"\(tensorflow: a CPU-only build\); install JAX's CUDA build: pip install "):
        backends.choose("gpu", None, is_installed=lambda backend: backend == "tensorflow")
    assert fake_probes.asked == ["tensorflow"]


def test_a_named_backend_is_checked_against_the_gpu_too(fake_probes):
    fake_probes.cpu_only = {"tensorflow"}
    with pytest.raises(UserError) as raised:
        named = ("tensorflow", "--backend tensorflow")
        backends.choose("gpu", named, cuda_major=13, is_installed=_everything_installed)
    assert str(raised.value) == (
        "--backend tensorflow cannot use a GPU here (tensorflow: a CPU-only build); "
        "install JAX's CUDA build: pip install 'gridbench[cuda13]', or name another backend"
    )
    choice = backends.choose("gpu", ("jax", "KERAS_BACKEND=jax"), is_installed=_everything_installed)
    assert (choice.backend, choice.reason) == ("jax", "KERAS_BACKEND=jax; it sees 1 GPU (Fake GPU; asked in 0.5 s)")


def test_a_cpu_search_keeps_keras_default_and_asks_nothing(fake_probes, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    choice = backends.choose("cpu", backends.named_backend(None), is_installed=_everything_installed)
    assert (choice.backend, choice.probe_s, fake_probes.asked) == ("tensorflow", 0.0, [])
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert backends.named_backend(None) == ("torch", "KERAS_BACKEND=torch")
    assert backends.named_backend("jax") == ("jax", "--backend jax")  # the flag wins over the variable


@pytest.mark.parametrize(
    "text, named",
    [
        (None, {}),
        ("jax", {"cpu": "jax", "gpu": "jax"}),
        ("cpu=tensorflow,gpu=jax", {"cpu": "tensorflow", "gpu": "jax"}),
    ],
)
def test_the_backend_flag_names_one_for_every_device_or_one_per_half(text, named):
    assert backends.parse_flag(text) == named


def test_a_malformed_per_half_backend_flag_is_refused():
    with pytest.raises(UserError, match="give a backend .jax. or one per device .cpu=tensorflow,gpu=jax."):
        backends.parse_flag("tpu=jax")


def _pretend_one_gpu(monkeypatch):
    monkeypatch.setattr(environment, "visible_gpu_count", lambda: 1)
    monkeypatch.setattr(environment, "cuda_driver_major", lambda: 13)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)


def test_both_halves_of_device_both_take_the_gpu_searchs_backend(monkeypatch, fake_probes):
    _pretend_one_gpu(monkeypatch)
    cpu, gpu = plan_pair(load_spec("digits"), SearchOptions(device="cpu"), SearchOptions(device="gpu"))
    assert (cpu.backend, gpu.backend) == ("jax", "jax")
    assert fake_probes.asked == ["jax"]  # asked once, for the GPU half
    assert cpu.backend_choice.reason.startswith("the GPU search's, so that the pair compares like for like (")
    assert cpu.backend_choice.probe_s == 0.0 and gpu.backend_choice.probe_s == 0.5
    # One per half, when the user names them.
    cpu, gpu = plan_pair(load_spec("digits"), SearchOptions(device="cpu", backend="tensorflow"), SearchOptions("gpu"))
    assert (cpu.backend, gpu.backend) == ("tensorflow", "jax")


def test_a_kernel_search_asks_no_keras_backend(monkeypatch, fake_probes):
    _pretend_one_gpu(monkeypatch)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if CuPy were installed
    plan = plan_search(load_spec("kernels-digits"), SearchOptions(device="gpu"))
    assert (plan.backend, plan.backend_choice.reason) == ("numpy/cupy", "model kernel_ridge computes with numpy/cupy")
    assert fake_probes.asked == []


def test_the_gpu_check_comes_before_any_backend_is_asked(monkeypatch, fake_probes):
    monkeypatch.setattr(environment, "visible_gpu_count", lambda: 0)
    with pytest.raises(UserError, match="no GPU is visible on this machine"):
        plan_search(load_spec("digits"), SearchOptions(device="gpu"))
    assert fake_probes.asked == []


@pytest.mark.parametrize("backend", ["jax", "torch", "tensorflow"])
def test_each_backends_real_probe_answers_in_a_subprocess(backend):
    """Here (no GPU) each installed backend says it sees none; the probe's own code must run, not crash."""
    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed")
    found = backends.probe(backend)
    assert found.error == "" and found.seconds > 0
    if environment.visible_gpu_count() == 0:
        assert found.gpus == 0


@pytest.mark.gpu
def test_on_a_gpu_machine_the_first_backend_that_sees_it_is_chosen(monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    choice = backends.choose("gpu", None, cuda_major=environment.cuda_driver_major())
    expected = next(b for b in backends.GPU_ORDER if backends.installed(b) and backends.probe(b).sees_gpu)
    assert choice.backend == expected and choice.probe_s > 0
    assert f"{expected} sees " in choice.reason


def test_ray_starts_while_the_backends_are_asked_and_never_for_bad_input(monkeypatch, fake_probes):
    """The planner runs `while_probing` (Ray's start) beside the probe, after the checks it can make first."""
    import threading

    monkeypatch.setattr(environment, "visible_gpu_count", lambda: 1)
    probing_threads, started = [], []

    def probe_noting_its_thread(backend):
        probing_threads.append(threading.current_thread().name)
        return fake_probes(backend)

    monkeypatch.setattr(backends, "probe", probe_noting_its_thread)
    spec = load_spec("digits")
    plan = plan_search(spec, SearchOptions(device="gpu"), lambda *request: started.append(request))
    assert plan.backend == "jax" and [request[1:3] for request in started] == [(plan.cpus, 1)]
    # The probe answered in another thread while this one (Ray's start) went on.
    assert probing_threads and probing_threads[0] != threading.main_thread().name
    with pytest.raises(UserError, match="--max-trials"):
        plan_search(spec, SearchOptions(device="gpu", max_trials=1), lambda *r: started.append(r))
    assert len(started) == 1  # bad input: no Ray
