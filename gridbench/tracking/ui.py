"""`gridbench ui`: the MLflow UI on 127.0.0.1 for the current store, lean enough for a small machine.

`mlflow server` starts a job runner with seven huey consumers by default (about
1.8 GB here, 10 processes); gridbench browses results only, so it turns jobs off
and runs one web worker: 2 processes, about 0.5 GB.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlparse

from gridbench.errors import UserError
from gridbench.tracking.store import artifact_location, check_tracking_uri, experiment_name, resolve_tracking_uri

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def server_command(tracking_uri: str, port: int) -> list[str]:
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", tracking_uri,
               "--host", HOST, "--port", str(port), "--workers", "1"]  # fmt: skip
    artifacts = artifact_location(tracking_uri)
    if artifacts:  # where gridbench's searches keep theirs, for experiments the UI itself creates
        command += ["--default-artifact-root", artifacts]
    return command


def runs_page(base_url: str, tracking_uri: str, spec_name: str | None) -> str:
    """The address of an experiment's runs page: the named one, else the newest gridbench experiment."""
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    if spec_name:
        experiment = client.get_experiment_by_name(experiment_name(spec_name))
        if experiment is None:
            raise UserError(f"no experiment {experiment_name(spec_name)!r} in {tracking_uri}")
    else:
        experiments = [e for e in client.search_experiments() if e.name.startswith(experiment_name(""))]
        if not experiments:
            return f"{base_url}/"
        experiment = max(experiments, key=lambda e: e.last_update_time or 0)
    return f"{base_url}/#/experiments/{experiment.experiment_id}/runs"


def serve(tracking_uri: str | None, port: int, spec_name: str | None) -> int:
    uri = resolve_tracking_uri(tracking_uri)
    check_tracking_uri(uri)
    if urlparse(uri).scheme in ("http", "https"):
        raise UserError(f"{uri} is a tracking server already; open it in a browser")
    port = port or free_port()
    base_url = f"http://{HOST}:{port}"
    page = runs_page(base_url, uri, spec_name)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(server_command(uri, port), env=env)
    try:
        import requests

        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise UserError(f"the MLflow server exited with status {server.returncode} (is port {port} free?)")
            try:
                if requests.get(f"{base_url}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise UserError(f"the MLflow server did not answer on {base_url} within 120 s")
            time.sleep(0.5)
        print(f"MLflow UI for {uri}: {page}", flush=True)
        print("Ctrl-C stops it.", flush=True)
        return server.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
