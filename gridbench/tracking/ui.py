"""`gridbench ui`: the MLflow UI on 127.0.0.1 for the current store, lean enough for a small machine.

`mlflow server` starts a job runner with seven huey consumers by default (about
1.8 GB here, 10 processes); gridbench browses results only, so it turns jobs off
and runs one web worker: 3 processes (gridbench, the server, its worker), 0.69 GiB.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from urllib.parse import urlparse

from gridbench.errors import UserError
from gridbench.tracking import schema
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


@dataclass(frozen=True)
class Pages:
    runs: str  # the experiment's runs page, sorted by its search's metric
    reports: tuple[str, ...] = ()  # the latest comparison's and scale's report.html, in the UI's artifact view


def pages(base_url: str, tracking_uri: str, spec_name: str | None) -> Pages:
    """The named experiment's pages, else those of the experiment whose search started last.

    (MLflow does not update an experiment's last_update_time when runs are added, so the
    experiment is found through its runs.)
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    if spec_name:
        experiment = client.get_experiment_by_name(experiment_name(spec_name))
        if experiment is None:
            raise UserError(f"no experiment {experiment_name(spec_name)!r} in {tracking_uri}")
        experiment_id = experiment.experiment_id
    else:
        ours = [e.experiment_id for e in client.search_experiments() if e.name.startswith(experiment_name(""))]
        latest = _latest(client, ours, "search")
        if latest is None:
            return Pages(f"{base_url}/")
        experiment_id = latest.info.experiment_id
    search = _latest(client, [experiment_id], "search")
    metric = search.data.tags.get(schema.METRIC) if search else None
    descending = search is None or search.data.tags.get(schema.METRIC_MODE, "max") == "max"
    sort = f"?orderByKey=metrics.%60{metric}%60&orderByAsc={str(not descending).lower()}" if metric else ""
    reports = []
    for kind in ("comparison", "scale"):
        run = _latest(client, [experiment_id], kind)
        if run is not None:
            reports.append(f"{base_url}/#/experiments/{experiment_id}/runs/{run.info.run_id}/artifactPath/report.html")
    return Pages(f"{base_url}/#/experiments/{experiment_id}/runs{sort}", tuple(reports))


def _latest(client, experiment_ids: list[str], kind: str):
    if not experiment_ids:
        return None
    runs = client.search_runs(
        experiment_ids,
        filter_string=f"tags.`{schema.KIND}` = '{kind}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0] if runs else None


def serve(tracking_uri: str | None, port: int, spec_name: str | None) -> int:
    uri = resolve_tracking_uri(tracking_uri)
    check_tracking_uri(uri)
    if urlparse(uri).scheme in ("http", "https"):
        raise UserError(f"{uri} is a tracking server already; open it in a browser")
    port = port or free_port()
    base_url = f"http://{HOST}:{port}"
    found = pages(base_url, uri, spec_name)
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
        print(f"MLflow UI for {uri}: {found.runs}", flush=True)
        # MLflow 3 keeps the runs table's columns in the browser, not the address: say where to choose them.
        print(
            "In the UI: choose 'Model training' (top left), then 'Columns' to add test_accuracy, steady_epoch_s, "
            "trial_wall_s, the grid's params and the device tag",
            flush=True,
        )
        for report in found.reports:
            print(f"report: {report}", flush=True)
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
