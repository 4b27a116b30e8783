"""A local Ray starts lean: its Python workers through gridbench.trial.ray_worker_setup, not Ray's setup_worker.py,
and no API server (gridbench.gridsearch.local_ray)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psutil
import pytest

from gridbench.gridsearch import local_ray
from gridbench.gridsearch.options import SearchOptions
from gridbench.trial import ray_worker_setup

# What the worker prints: its arguments and the variables the tests set, so the tests see what it was started with.
SHOW_WORKER = "import json, os, sys; print(json.dumps([sys.argv[1:], {k: os.environ.get(k) for k in sys.argv[1:]}]))"


def _context(**fields) -> str:
    plain = {"command_prefix": [], "env_vars": {}, "py_executable": sys.executable, "override_worker_entrypoint": None}
    return json.dumps({**plain, "java_jars": [], **fields})


def _started(tmp_path, context: str, *worker_args: str) -> tuple[list[str], dict]:
    """Runs the setup script as the raylet would, with a worker that shows how it was started."""
    worker = tmp_path / "worker.py"
    worker.write_text(SHOW_WORKER)
    command = [sys.executable, ray_worker_setup.__file__, str(worker), *worker_args]
    command += ["--language=PYTHON", f"--serialized-runtime-env-context={context}"]
    env = {**os.environ, "GRIDBENCH_TEST_HOME": "/home/someone"}
    env.pop("GRIDBENCH_TEST_UNSET", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    args, seen = json.loads(result.stdout.splitlines()[-1])
    return args, seen


def test_the_raylets_arguments_are_read_as_rays_setup_worker_reads_them():
    context = _context(env_vars={"A": "1"})
    argv = ["default_worker.py", "--node-ip-address=127.0.0.1", "--language=PYTHON", "--runtime-env-hash=1"]
    serialized, language, worker = ray_worker_setup.parse([*argv, f"--serialized-runtime-env-context={context}"])
    assert (json.loads(serialized), language) == (json.loads(context), "PYTHON")
    assert worker == ["default_worker.py", "--node-ip-address=127.0.0.1", "--runtime-env-hash=1"]
    assert ray_worker_setup.parse(["w.py", "--language", "JAVA"]) == ("{}", "JAVA", ["w.py"])


@pytest.mark.parametrize(
    ("fields", "language", "plain"),
    [
        ({}, "PYTHON", True),  # Tune's trial actors: environment variables and this interpreter
        ({"py_executable": None}, "PYTHON", True),
        ({"command_prefix": ["source", "activate", "env", "&&"]}, "PYTHON", False),  # conda
        ({"py_executable": "uv run python"}, "PYTHON", False),
        ({"override_worker_entrypoint": "/other/default_worker.py"}, "PYTHON", False),  # a container
        ({"java_jars": ["a.jar"]}, "PYTHON", False),
        ({"a_later_field": 1}, "PYTHON", False),  # a Ray whose context has more to it
        ({}, "JAVA", False),
    ],
)
def test_only_a_plain_context_is_started_without_rays_script(fields, language, plain):
    assert ray_worker_setup.plain(json.loads(_context(**fields)), language) is plain


def test_the_worker_starts_with_its_variables_expanded_as_ray_expands_them(tmp_path):
    env = {"HOME_X": "${GRIDBENCH_TEST_HOME}/x", "GONE": "a${GRIDBENCH_TEST_UNSET}b", "PLAIN": "1"}
    args, seen = _started(tmp_path, _context(env_vars=env), "HOME_X", "GONE", "PLAIN", "--worker-id=7")
    assert args == ["HOME_X", "GONE", "PLAIN", "--worker-id=7"]  # the worker's own, in order, without the setup's
    assert seen == {"HOME_X": "/home/someone/x", "GONE": "ab", "PLAIN": "1", "--worker-id=7": None}


def test_any_other_context_is_handed_to_rays_own_script(tmp_path):
    # Ray's script runs the prefix in bash before the worker; gridbench's would refuse it, so this proves the handover.
    context = _context(command_prefix=["export", "VIA_RAY=yes", "&&"], env_vars={"A": "${GRIDBENCH_TEST_HOME}"})
    args, seen = _started(tmp_path, context, "VIA_RAY", "A")
    assert args == ["VIA_RAY", "A"] and seen == {"VIA_RAY": "yes", "A": "/home/someone"}


def test_ray_init_starts_lean_only_inside_the_context(monkeypatch):
    from ray._private import services
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    rays_api_server, rays_get_node = Node.start_api_server, services.get_node
    with local_ray.lean_start() as start:
        assert start == local_ray.LEAN
        assert RayParams().setup_worker_path == ray_worker_setup.__file__ and RayParams().no_monitor is True
        assert RayParams(setup_worker_path="/asked.py").setup_worker_path == "/asked.py"
        assert Node.start_api_server is not rays_api_server and services.get_node is not rays_get_node
        assert local_ray.system_config(start) == local_ray.LEAN_SYSTEM_CONFIG
    assert RayParams().setup_worker_path is None and not RayParams().no_monitor
    assert Node.start_api_server is rays_api_server and services.get_node is rays_get_node
    monkeypatch.setenv(local_ray.CHOICE_ENV, "ray")
    with local_ray.lean_start() as start:
        assert start == local_ray.RAY and RayParams().setup_worker_path is None
        assert Node.start_api_server is rays_api_server and services.get_node is rays_get_node
        assert local_ray.system_config(start) == {}


class _NodeTable:
    """Ray's GlobalState for wait_until_registered: a node table whose node is alive from the `alive_from`-th read."""

    def __init__(self, alive_from: int, node_id: str = "ab12"):
        self.reads, self.alive_from, self.node_id, self.options, self.disconnected = 0, alive_from, node_id, None, False

    def __call__(self):  # the class, as wait_until_registered makes its own
        return self

    def _initialize_global_state(self, options):
        self.options = options

    def node_table(self):
        self.reads += 1
        other = {"NodeID": "ffff", "Alive": True}  # another node, or the same node's earlier, dead entry
        return [other, {"NodeID": self.node_id, "Alive": self.reads >= self.alive_from}]

    def disconnect(self):
        self.disconnected = True


def test_a_lean_start_learns_that_its_raylet_registered_by_reading_the_node_table_every_20_ms():
    table = _NodeTable(alive_from=3)
    assert local_ray.wait_until_registered(table, "options", "ab12", timeout_s=5)
    assert (table.reads, table.options, table.disconnected) == (3, "options", True)
    never = _NodeTable(alive_from=10**9)
    assert not local_ray.wait_until_registered(never, "options", "ab12", timeout_s=0.1)  # then Ray's own wait
    assert 2 <= never.reads <= 0.1 / local_ray.NODE_POLL_S + 2 and never.disconnected


@pytest.mark.parametrize(
    ("variable", "value", "line"),
    [
        ("GRIDBENCH_RAY_START", "fast", "GRIDBENCH_RAY_START='fast': say lean (the default) or ray, or leave it unset"),
        (
            "GRIDBENCH_NODE_PER_GPU",
            "yes",
            "GRIDBENCH_NODE_PER_GPU='yes': say 1 (one Ray node per GPU) or 0 (one node), or leave it unset",
        ),
        (
            "GRIDBENCH_PLAIN_WORKERS",
            "off",
            "GRIDBENCH_PLAIN_WORKERS='off': say 1 (plain workers, the default) or 0 (Tune's runtime_env)",
        ),
    ],
)
def test_an_unknown_choice_of_start_is_refused_in_one_line_leaving_nothing(tmp_path, variable, value, line):
    env = {**os.environ, variable: value}
    command = [sys.executable, "-m", "gridbench", "search", "digits", "--tracking-uri", f"sqlite:///{tmp_path}/m.db"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode != 0
    assert result.stderr.splitlines() == [f"gridbench: error: {line}"], result.stderr
    assert list(tmp_path.iterdir()) == []  # no store, and no journal's directory beside it


def _ray_processes() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.is_running()]


@pytest.mark.slow
def test_a_lean_local_ray_has_no_api_server_nor_monitor_and_starts_workers_through_gridbenchs_script(monkeypatch):
    import ray

    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.setenv("GRIDBENCH_TEST_HOME", "/home/someone")
    session = RaySession()
    try:
        session.start(SearchOptions(), cpus=1, gpus=0)
        assert session.ray_start == local_ray.LEAN
        processes = _ray_processes()
        (raylet,) = [p for p in processes if p.name() == "raylet"]
        assert any(ray_worker_setup.__file__ in part for part in raylet.cmdline())
        # Ray's API server runs ray/dashboard/dashboard.py, its autoscaler monitor autoscaler/_private/monitor.py;
        # the raylet's agents (dashboard/agent.py) stay.
        gone = ("dashboard/dashboard.py", "_private/monitor.py")
        assert not [p.cmdline() for p in processes if any(part.endswith(gone) for part in p.cmdline())]

        @ray.remote(num_cpus=1, runtime_env={"env_vars": {"SEEN": "${GRIDBENCH_TEST_HOME}/y"}})
        class Shows:
            def variable(self) -> str | None:
                return os.environ.get("SEEN")

        assert ray.get(Shows.remote().variable.remote(), timeout=120) == "/home/someone/y"

        @ray.remote(num_cpus=1)
        def retry_pause_ms() -> int:  # as the raylet's and the workers' configuration has it
            return ray._raylet.Config.raylet_client_connect_timeout_milliseconds()

        assert ray.get(retry_pause_ms.remote(), timeout=120) == 50  # Ray's own: 1000
    finally:
        session.stop()
