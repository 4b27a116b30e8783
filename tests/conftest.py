"""Test setup: markers, the real MNIST file, and a path that Ray workers can import fakes from."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path

import pytest
from stores import new_store

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
# Ray workers are separate processes: they find tests/fakes.py through PYTHONPATH.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS_DIR), os.environ.get("PYTHONPATH")]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Two test workers share CI's two cores, so OpenMP's threads (PyTorch's) sleep while they wait instead of spinning:
# a torch trial's epoch took 2.2 s beside another test's training with spinning, 0.1 s without (0.08 s alone).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# On CPUs, XLA (JAX's, and TensorFlow's under Keras' jit_compile) compiles at LLVM's optimisation level 1 instead
# of 2: every family on JAX's compiled loop took 74 s instead of 121 s, its steady epochs no slower. Searches record
# it (env.XLA_FLAGS). The GPU tests keep XLA's defaults, as the speed they check is users' speed.
if not os.environ.get("XLA_FLAGS"):
    from gridbench.environment import visible_gpu_count

    if visible_gpu_count() == 0:
        os.environ["XLA_FLAGS"] = "--xla_backend_optimization_level=1"
# Searches keep JAX's compiled programs across runs (gridbench.compile_cache): tests keep theirs
# apart from the user's, in a directory of this test process that goes with it.
_COMPILE_CACHE = tempfile.TemporaryDirectory(prefix="gridbench-test-jax-cache-")
os.environ["GRIDBENCH_CACHE_DIR"] = _COMPILE_CACHE.name


def _gpu_visible() -> bool:
    from gridbench.environment import visible_gpu_count

    return visible_gpu_count() > 0


def pytest_configure(config):
    # pytest-xdist's --dist loadfile hands files to the workers in the collection's order (set below) instead of
    # by their number of tests, which would put test_cli's 58 quick tests first and test_compare_e2e's 8 long ones
    # after most files.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def _longest_files_first(items, gpu_tests_skipped: bool) -> None:
    """The files with the most `slow` tests that run here go first, each file's tests together and in their order,
    so that the two workers start the long files early and the run does not end on one of them alone."""
    weight = Counter(
        item.path
        for item in items
        if item.get_closest_marker("slow") and not (gpu_tests_skipped and item.get_closest_marker("gpu"))
    )
    items.sort(key=lambda item: -weight[item.path])  # stable


def pytest_collection_modifyitems(config, items):
    gpu_visible = _gpu_visible()
    _longest_files_first(items, gpu_tests_skipped=not gpu_visible)
    if gpu_visible:
        return
    skip = pytest.mark.skip(reason="needs a visible NVIDIA GPU")
    for item in items:
        if item.get_closest_marker("gpu"):  # the marker, not a parameter id that says "gpu"
            item.add_marker(skip)


@pytest.fixture(scope="session")
def mnist_dir() -> Path:
    """The directory holding the real mnist.npz: $GRIDBENCH_TEST_DATA_DIR, else ../shared/data."""
    directory = Path(os.environ.get("GRIDBENCH_TEST_DATA_DIR", REPO_ROOT.parent / "shared" / "data"))
    if not (directory / "mnist.npz").is_file():
        pytest.skip(f"no mnist.npz in {directory} (set GRIDBENCH_TEST_DATA_DIR)")
    return directory


@pytest.fixture
def kept_environ():
    """For tests that configure this process as a trial would: the environment is restored after."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class FakeProbes:
    """Stands in for gridbench.gridsearch.backends.probe: the backends in `seeing` see one GPU, the rest none."""

    def __init__(self, seeing=("jax",), cpu_only=()):
        from gridbench.gridsearch.backends import Probe

        self.seeing, self.cpu_only, self.asked, self._probe = set(seeing), set(cpu_only), [], Probe

    def __call__(self, backend):
        self.asked.append(backend)
        if backend in self.seeing:
            return self._probe(backend, 1, "Fake GPU", seconds=0.5)
        return self._probe(backend, 0, gpu_build=backend not in self.cpu_only, seconds=0.5)


@pytest.fixture
def fake_probes(monkeypatch) -> FakeProbes:
    """Backends asked about GPUs without subprocesses: by default JAX sees one GPU."""
    from gridbench.gridsearch import backends

    probes = FakeProbes()
    monkeypatch.setattr(backends, "probe", probes)
    return probes


@pytest.fixture
def store(tmp_path) -> str:
    """A new, empty SQLite MLflow store in a temporary directory."""
    return new_store(tmp_path)
