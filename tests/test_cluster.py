"""A search on a Ray cluster of two nodes (on loopback) recording into a real `mlflow server`."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import requests
from stores import new_store

from gridbench.tracking.ui import HOST, free_port, server_command

pytestmark = pytest.mark.slow


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        server_command(new_store(tmp_path, "server.db"), port),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://{HOST}:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(f"{url}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            assert server.poll() is None, "mlflow server exited"
            assert time.monotonic() < deadline, "mlflow server did not answer in 120 s"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


@pytest.fixture(scope="module")
def two_node_cluster():
    """One cluster for both tests, a search on it and a local search beside it: started once, the file took 61.1
    CPU s instead of 79.3 (alone on a shared 2-core machine, 2026-11-26)."""
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        cluster.shutdown()


def test_a_search_on_two_nodes_records_every_trial_once_in_the_server(mlflow_server, two_node_cluster, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gridbench",
            "search",
            "digits",
            "--address",
            two_node_cluster.address,
            "--tracking-uri",
            mlflow_server,
            "--set",
            "epochs=2",
        ],  # fmt: skip
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"on the Ray cluster at {two_node_cluster.address}" in result.stdout
    assert not (tmp_path / "mlflow.db").exists()  # nothing went to a local store

    from mlflow import MlflowClient

    from gridbench.spec import load_spec
    from gridbench.tracking import experiment_name

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name(experiment_name("digits"))
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get("gridbench.kind") == "search"]
    trials = [r for r in runs if r.data.tags.get("gridbench.kind") == "trial"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["ray.address"] == two_node_cluster.address and parents[0].data.tags["ray.nodes"] == "2"
    # Every configuration ran and was recorded exactly once.
    spec = load_spec("digits")
    expected = sorted(tuple(str(c[axis]) for axis in sorted(spec.grid)) for c in spec.configurations())
    recorded = sorted(tuple(t.data.params[axis] for axis in sorted(spec.grid)) for t in trials)
    assert recorded == expected
    assert all(t.info.status == "FINISHED" for t in trials)
    # Both nodes trained (one CPU each, one trial at a time each).
    assert len({t.data.tags["ray.node_id"] for t in trials}) == 2
    assert parents[0].data.metrics["trials_finished"] == len(expected)


def test_a_local_search_starts_its_own_ray_beside_a_running_cluster(two_node_cluster, tmp_path):
    """Ray's ray.init() joins the latest cluster started on the machine; a local search must not."""
    store = new_store(tmp_path)
    args = [
        "digits",
        "--tracking-uri",
        store,
        "--set",
        "epochs=2",
        "--grid",
        "hidden_units=32",
        "--cpus-per-trial",
        "1",
    ]
    args += ["--grid", "learning_rate=0.01"]
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "search", *args], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    from mlflow import MlflowClient

    from gridbench.environment import usable_cores
    from gridbench.tracking import experiment_name

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name(experiment_name("digits")).experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("gridbench.kind") == "search"]
    assert parent.data.tags["ray.address"] == "local" and parent.data.tags["ray.nodes"] == "1"
    assert parent.data.tags["cpus_used"] == str(usable_cores())  # this machine's cores, not the cluster's two
