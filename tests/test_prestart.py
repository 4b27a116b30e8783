"""Workers started for Tune's trial actors as soon as Ray is up, their imports done ahead (--prestart-workers):
gridbench.gridsearch.prestart (the driver's side) and gridbench.trial.prestart (the worker's setup hook)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from gridbench.gridsearch.plain_workers import tune_actor_runtime_env
from gridbench.gridsearch.prestart import TUNE_TRAINABLE_MODULE, actor_serialized_env, job_runtime_env
from gridbench.trial import prestart as worker_side

PROGRAMS = Path(__file__).parent / "programs"


def test_tunes_actor_env_is_its_default_and_the_variables_it_propagates():
    env = tune_actor_runtime_env({"AWS_ACCESS_KEY_ID": "key", "HOME": "/root"})
    assert env == {"env_vars": {"PL_DISABLE_FORK": "1", "AWS_ACCESS_KEY_ID": "key"}}


def test_without_a_job_env_the_actor_keeps_pythons_serialisation():
    serialized = actor_serialized_env("{}", {"env_vars": {"PL_DISABLE_FORK": "1"}})
    assert serialized == '{"env_vars": {"PL_DISABLE_FORK": "1"}}'


def test_with_a_job_env_the_two_merge_as_rays_core_worker_writes_them():
    job = '{"env_vars": {"A": "1", "PL_DISABLE_FORK": "0"}, "py_modules": ["gcs://_ray_pkg_x.zip"]}'
    merged = actor_serialized_env(job, {"env_vars": {"PL_DISABLE_FORK": "1"}})
    assert merged == '{"env_vars":{"A":"1","PL_DISABLE_FORK":"1"},"py_modules":["gcs://_ray_pkg_x.zip"]}'


def test_the_jobs_env_gains_the_hook_and_keeps_a_users_modules():
    user = {"py_modules": ["/models/mine.py"], "env_vars": {"A": "1"}}
    env = job_runtime_env(user, "/tmp/search/prestart.json")
    assert env == {
        "py_modules": ["/models/mine.py"],
        "env_vars": {"A": "1", worker_side.PLAN_ENV: "/tmp/search/prestart.json"},
        "worker_process_setup_hook": "gridbench.trial.prestart.import_ahead",
    }
    assert user == {"py_modules": ["/models/mine.py"], "env_vars": {"A": "1"}}  # the user's own is left as it was


def _run(program: str, *arguments: str, cwd: Path, visible: str | None = None) -> subprocess.CompletedProcess:
    """The program in a fresh process; `visible`: its CUDA_VISIBLE_DEVICES, the GPUs a Ray worker would see."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    return subprocess.run(
        [sys.executable, str(PROGRAMS / program), *arguments],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=cwd,
        env=env,
    )


def _line(result: subprocess.CompletedProcess, prefix: str) -> dict:
    line = next((x for x in result.stdout.splitlines() if x.startswith(prefix)), None)
    assert line, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(line[len(prefix) :])


@pytest.mark.slow
def test_the_hook_imports_the_plans_backend_and_starts_no_device(tmp_path):
    """Keras' default is TensorFlow: on jax, a hook that ignored the plan would import the wrong one. (TensorFlow,
    the default, is what every other search's worker imports; not run again here, for the suite's time.)"""
    backend = "jax"
    plan = {
        "backend": backend,
        "device": "cpu",
        "cpus": 1,
        "gpus_per_trial": 0.0,
        "modules": ["gridbench.gridsearch.tuning", "gridbench.workloads.keras_mlp"],
        "keras": True,
    }
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    found = _line(_run("import_ahead.py", str(tmp_path / "plan.json"), cwd=tmp_path), "AHEAD ")
    assert found["keras_backend"] == backend and found["keras_backend_env"] == backend
    assert {"keras", "gridbench.gridsearch.tuning", "gridbench.workloads.keras_mlp"} <= set(found["imported"])
    assert not {"sklearn", "pandas"} & set(found["imported"])  # Keras without them (gridbench.trial.keras_import)
    assert found.get("jax_backend_started") is not True  # Ray hands out the device only with the trial's lease
    (tags, metrics), (later_tags, later_metrics) = found["first"], found["later"]
    assert tags == later_tags == {"worker.imported_ahead": "true"}
    assert metrics["worker.import_ahead_s"] > 0 and later_metrics == {}  # the worker's first trial reports them


def test_without_the_plans_file_the_hook_imports_nothing(tmp_path):
    found = _line(_run("import_ahead.py", str(tmp_path / "absent.json"), cwd=tmp_path), "AHEAD ")
    (tags, metrics), later = found["first"], found["later"]
    assert found["imported"] == [] and tags == {"worker.imported_ahead": "false"} and later == [tags, {}]
    # Imported ahead or not, the worker's first trial says when its process started: how long it waited for the trial
    assert list(metrics) == ["worker.process_started_at"]
    assert 0 < time.time() - metrics["worker.process_started_at"] < 300


@pytest.mark.slow
def test_a_tune_trial_runs_in_the_worker_started_for_it(tmp_path):
    """Fails if Ray or Tune change the trial actor's runtime_env, or how Ray hashes it: the trial then starts a
    worker of its own. The job's env as a user's model makes it with --prestart-workers: uploaded modules and the
    hook (the hook alone is the real search's below; the program also runs "none" and "py_modules")."""
    pids = _line(_run("tune_trial_in_prestarted.py", "hook", cwd=tmp_path), "PIDS ")
    assert len(pids["prestarted"]) == 1
    assert pids["trial"] in pids["prestarted"]
    # In that worker the hook imported Tune's trainable and built Ray's serializers before the trial's actor came
    ahead = pids["ahead"]
    assert ahead["modules"] == [TUNE_TRAINABLE_MODULE] and ahead["ray_serializers"] is True and not ahead["failed"]


def _search(tmp_path: Path, ahead: str) -> tuple[dict, dict]:
    from mlflow import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    found = _line(_run("prestarted_search.py", store, ahead, cwd=tmp_path), "SEARCH ")
    client = MlflowClient(store)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], max_results=100)
    parent = next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)
    return found, parent.data.tags


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["on", "on-tune"])
def test_a_searchs_trials_land_in_the_workers_started_ahead(tmp_path, mode):
    """3 trials, 2 at once: both workers asked of Ray as soon as it was up run every trial, and imported ahead; Tune's
    actors with the job's runtime_env alone (on, as by default), or Tune's merged in (GRIDBENCH_PLAIN_WORKERS=0)."""
    found, tags = _search(tmp_path, mode)
    trials, summary = found["trials"], found["summary"]
    assert [t["status"] for t in trials] == ["FINISHED"] * 3
    pids = {t["pid"] for t in trials}
    assert len(found["before_fit"]) == 2 and pids == set(found["before_fit"]), found
    assert all(t["imported_ahead"] == "true" for t in trials)
    assert sum(t["import_ahead_s"] is not None for t in trials) == 2  # once per worker: its first trial
    assert summary["workers_prestarted"] == 2 and summary["workers_imported_ahead"] == 2
    assert summary["import_ahead_s"] == pytest.approx(sum(t["import_ahead_s"] or 0 for t in trials))
    assert tags["prestart_workers"] == "on"
    assert tags["trial_workers"] == ("plain" if mode == "on" else "runtime_env")


@pytest.mark.slow
def test_by_default_a_searchs_trials_land_in_plain_workers_started_as_soon_as_ray_was_up(tmp_path):
    """Fails if Tune's actors keep their runtime_env (or Ray hashes an actor without one otherwise than the workers
    asked for): they would then start workers of their own."""
    found, tags = _search(tmp_path, "plain")
    trials, summary = found["trials"], found["summary"]
    assert [t["status"] for t in trials] == ["FINISHED"] * 3
    assert len(found["before_fit"]) == 2 and {t["pid"] for t in trials} == set(found["before_fit"])
    assert all(t["imported_ahead"] == "false" for t in trials)  # plain: nothing imported ahead
    assert summary["workers_prestarted"] == 2 and summary["workers_imported_ahead"] == 0
    # Their processes began before Tune's start: the raylet forks them as it answers the request, made once Ray was up
    assert summary["workers_started_ahead"] == 2
    assert tags["trial_workers"] == "plain" and tags["prestart_workers"] == "off"


@pytest.mark.slow
def test_with_plain_workers_off_each_trials_worker_starts_when_it_is_due(tmp_path):
    found, tags = _search(tmp_path, "off")
    assert found["before_fit"] == [] and len({t["pid"] for t in found["trials"]}) == 2
    assert found["summary"]["workers_prestarted"] == found["summary"]["workers_started_ahead"] == 0
    assert tags["trial_workers"] == "runtime_env"


def _record(pid: str, metrics: dict, ahead: str = "true"):
    from gridbench.tracking.records import TrialRecord

    tags = {"host": "h", "pid": pid, "worker.imported_ahead": ahead}
    return TrialRecord(pid + str(len(metrics)), {}, 0, "FINISHED", metrics, tags, 0.0, 1.0)


def test_a_searchs_imports_ahead_count_each_worker_once():
    from gridbench.gridsearch.summary import imports_ahead

    first = {
        "worker.import_ahead_s": 4.0,
        "worker.import_ahead_started_at": 100.0,
        "worker.import_ahead_ended_at": 104.0,
        "worker.process_started_at": 99.0,
    }
    late = {**first, "worker.import_ahead_s": 5.0, "worker.import_ahead_ended_at": 112.0}
    late["worker.process_started_at"] = 110.5
    trials = [_record("1", first), _record("1", {}), _record("2", late), _record("3", {}, ahead="false")]
    assert imports_ahead(trials, launched_at=110.0) == {
        "workers_started_ahead": 1,  # worker 2 started after Tune's start: Ray started it for its trial
        "workers_imported_ahead": 2,
        "import_ahead_s": 9.0,  # worker 1's once, though two of its trials ran
        "import_ahead_after_launch_s": 2.0,
    }
    assert imports_ahead(trials[3:], launched_at=110.0)["import_ahead_after_launch_s"] == 0.0


@pytest.mark.parametrize(("device", "backend", "imported"), [("gpu", "torch", False), ("gpu", "jax", True)])
def test_a_gpu_searchs_torch_is_left_to_the_trial(tmp_path, device, backend, imported):
    """Keras' torch backend starts CUDA as it is imported, with every GPU visible, before Ray assigns one."""
    from types import SimpleNamespace

    from gridbench.datasets import DataSource
    from gridbench.gridsearch.prestart import write_plan

    workload = SimpleNamespace(train="gridbench.workloads.keras_mlp", framework="keras", flat_inputs=True)
    plan = SimpleNamespace(
        backend=backend,
        options=SimpleNamespace(device=device),
        cpus_per_trial=4,
        gpus_per_trial=1.0,
        spec=SimpleNamespace(workload=workload, seed=3),
        data=DataSource("mnist", "/data/mnist.npz"),
    )
    write_plan(plan, str(tmp_path / "plan.json"))
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written["data"] == {"name": "mnist", "path": "/data/mnist.npz", "seed": 3, "flat": True}  # on any backend
    plan.data = DataSource("mnist", None, synthetic=True)  # shaped by each trial's hyperparameters: the trial's own
    write_plan(plan, str(tmp_path / "plan.json"))
    assert json.loads((tmp_path / "plan.json").read_text())["data"] is None
    assert ("gridbench.workloads.keras_mlp" in written["modules"]) is imported
    assert TUNE_TRAINABLE_MODULE in written["modules"]  # what Ray unpickles the trial's actor from, on any backend
    assert written["keras"] is imported
    assert written["backend"] == backend and written["device"] == device


@pytest.mark.parametrize(
    ("visible", "count"), [("0", 1), ("3", 1), ("0,1", 2), ("", 0), ("-1", 0), ("1,-1,2", 1), ("GPU-5d1e", 1)]
)
def test_a_worker_counts_the_gpus_it_would_start_cuda_on(monkeypatch, visible, count):
    from gridbench.trial import gpu_monitor

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpu_monitor.visible_count() == count


@pytest.mark.slow
@pytest.mark.parametrize(("visible", "ahead"), [("0", True), ("0,1", False)])
def test_a_worker_seeing_one_gpu_starts_its_jax_backend_in_the_hook_and_its_trial_reports_no_start(
    tmp_path, visible, ahead
):
    """The GPU a worker sees alone is the one Ray hands its trials; seeing two, it cannot know which. (Here JAX finds
    no GPU and starts its CPU backend: what is checked is which start runs where, and what each side reports.)"""
    plan = {"backend": "jax", "device": "gpu", "cpus": 1, "gpus_per_trial": 1.0, "modules": [], "keras": False}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    found = _line(_run("import_ahead.py", str(tmp_path / "plan.json"), cwd=tmp_path, visible=visible), "AHEAD ")
    (_, metrics), (_, later) = found["first"], found["later"]
    assert found.get("jax_backend_started", False) is ahead
    assert ("worker.device_start_ahead_s" in metrics) is ahead and later == {}
    if ahead:
        assert 0 < metrics["worker.device_start_ahead_s"] <= metrics["worker.import_ahead_s"]  # inside the hook's span
        assert found["trial_backend_report"] == {}  # the start is the hook's, reported once, by the hook's record


class FakeNvml:
    """pynvml's calls that gpu_monitor.describe makes, on a host of 4 GPUs; `asked`: the GPUs described."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self.asked.append(index)
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return "NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return f"GPU-{handle}"

    def nvmlDeviceGetMemoryInfo(self, handle: int):
        return types.SimpleNamespace(total=80 * 2**30)


@pytest.mark.parametrize(("visible", "described"), [(None, [0, 1, 2, 3]), ("2,3", [2, 3])])
def test_a_gpu_plans_hook_describes_every_gpu_its_trials_may_get(monkeypatch, tmp_path, visible, described):
    """The trial then finds its GPU's tags, whichever GPU Ray hands it, without asking NVML beside its device's start
    (torch here: no backend starts ahead)."""
    from gridbench.trial import gpu_monitor

    plan = {"backend": "torch", "device": "gpu", "cpus": 1, "gpus_per_trial": 1.0, "modules": [], "keras": False}
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    environ = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    environ.update(
        {worker_side.PLAN_ENV: str(tmp_path / "plan.json"), **({"CUDA_VISIBLE_DEVICES": visible} if visible else {})}
    )
    monkeypatch.setattr(os, "environ", environ)  # the hook sets the trial's variables: this test's copy takes them
    fake = FakeNvml()
    monkeypatch.setattr(gpu_monitor, "nvml", lambda: fake)
    gpu_monitor.describe.cache_clear()
    try:
        worker_side.import_ahead()
        assert fake.asked == described and worker_side.DONE_ENV in environ
        assert gpu_monitor.describe(described[-1])["gpu.uuid"] == f"GPU-{described[-1]}"
        assert fake.asked == described  # the trial's own ask: no NVML call
    finally:
        gpu_monitor.describe.cache_clear()


@pytest.mark.parametrize(
    ("name", "device", "visible", "read"),
    [
        ("mnist", "cpu", "", True),
        ("imdb", "cpu", "", False),
        ("mnist", "gpu", "0", True),
        ("mnist", "gpu", "0,1", False),
    ],
)
def test_the_hook_reads_the_plans_data_and_the_first_trial_waits_for_that_read(tmp_path, name, device, visible, read):
    """mnist's read began in the hook: the trial's own read finds the data after the file is gone, and the trial
    reports that read (data_read_s, data_wait_s) with when the hook began it. IMDb's reading is shaped by the trial's
    own hyperparameters: left to the trial. So is a GPU worker's that sees two GPUs: its trial's device start, which
    cannot begin in the hook, hides the read. (With no GPU here, JAX's start in the hook is its CPU backend's.)"""
    import numpy as np

    from gridbench import datasets

    path = tmp_path / f"{name}.npz"
    np.savez_compressed(path, **{key: np.zeros(shape, dtype) for key, (shape, dtype) in datasets.MNIST_ARRAYS.items()})
    data = {"name": name, "path": str(path), "seed": 0, "flat": True}
    plan = {"backend": "jax", "device": device, "cpus": 1, "gpus_per_trial": float(device == "gpu"), "modules": []}
    (tmp_path / "plan.json").write_text(json.dumps({**plan, "keras": False, "data": data}))
    found = _line(_run("import_ahead.py", str(tmp_path / "plan.json"), cwd=tmp_path, visible=visible), "AHEAD ")
    (_, metrics), report = found["first"], found["trial_data_report"]
    assert ("worker.data_read_ahead_started_at" in metrics) is read
    assert (found["trial_data_shape"] == [60000, 784]) is read  # flattened, as the plan's workload reads them
    if read:
        began = metrics["worker.data_read_ahead_started_at"]
        assert metrics["worker.import_ahead_started_at"] <= began <= metrics["worker.import_ahead_ended_at"]
        assert report["data_read_s"] > 0 and 0 <= report["data_wait_s"] <= report["data_read_s"]
    else:
        assert report == {}
