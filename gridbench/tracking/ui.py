"""`gridbench ui`: the MLflow UI on 127.0.0.1 for the current store, lean enough for a small machine.

`mlflow server` starts a job runner with seven huey consumers by default (about
1.8 GB here, 10 processes); gridbench browses results only, so it turns jobs off
and runs one web worker: 3 processes (gridbench, the server, its worker), 0.69 GiB.
The terminal shows gridbench's own lines only: the server's (MLflow's notices, uvicorn's
access lines, their warnings) go to a log file that the first line names.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import quote, urlparse

from gridbench.errors import UserError
from gridbench.tracking import schema
from gridbench.tracking.stale import mark_stale_searches
from gridbench.tracking.store import (
    artifact_location,
    check_store_exists,
    experiment_name,
    quiet_mlflow,
    resolve_tracking_uri,
)

HOST = "127.0.0.1"
DEFAULT_PORT = 5000  # `gridbench ui`'s, and where links to a local store's UI expect it


def ui_base(tracking_uri: str, given: str | None = None) -> str:
    """Where the store's UI is: `given`, the tracking server itself, else `gridbench ui` on its default port."""
    if given:
        return given.rstrip("/")
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return f"http://{HOST}:{DEFAULT_PORT}"


def compare_runs_url(base_url: str, run_ids: Sequence[str], experiment_ids: Sequence[str]) -> str:
    """MLflow's compare view of these runs, side by side (`#/compare-runs?runs=[...]&experiments=[...]`)."""
    runs = quote(json.dumps(list(run_ids), separators=(",", ":")), safe="")
    experiments = quote(json.dumps(sorted({e for e in experiment_ids if e}), separators=(",", ":")), safe="")
    return f"{base_url}/#/compare-runs?runs={runs}&experiments={experiments}"


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


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
    runs: str  # the experiment's runs page: Model training mode, searches with their trials nested
    reports: tuple[str, ...] = ()  # the latest comparison's and scale's report.html, in the UI's artifact view
    compare: str | None = None  # MLflow's compare view of the latest comparison's searches
    saved_view: bool = False  # the runs page opens on gridbench's saved view (its columns chosen)


# MLflow keeps saved views of the runs table (columns, sort, filter) as the experiment tag
# mlflow.sharedViewState.<key>, opened by ?viewStateShareKey=<key>. Undocumented: read from the UI bundle of
# MLflow 3.15-3.17 (a flat state whose selectedColumns are "metrics.`name`", "params.`name`"...), used from the
# versions it was seen in, and checked by a browser test (tests/test_ui_browser.py); elsewhere the hint is printed.
SAVED_VIEW_SINCE = (3, 15)
SAVED_VIEW_PREFIX = "mlflow.sharedViewState."
SAVED_VIEW_KEY = "gridbench-comparison"


# What a search's row shows in the runs table: its best metric, its makespan and its whole command's time.
SEARCH_COLUMNS = (schema.BEST_METRIC, schema.MAKESPAN_S, schema.WHOLE_COMMAND_S)
SHARED_VIEW_NOTE = (
    "MLflow's banner \"You're viewing a shared view\" means these columns are gridbench's saved view: change "
    "them freely (not saved), or keep them as your own view with the banner's button"
)


def saved_view_supported() -> bool:
    import mlflow

    try:
        major, minor = (int(part) for part in mlflow.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= SAVED_VIEW_SINCE


def view_columns(search) -> list[str]:
    """The runs table's columns a comparison reads: accuracy, training time, wall time, the search's own figures
    (best metric, makespan, whole command: its row's), device, the grid's axes.

    MLflow orders the metrics by name, then the params. They fit a 1,900-pixel window beside MLflow's own
    columns (run name, created, duration); in a narrower one the grid's axes are off-screen, to the right."""
    tags, params = search.data.tags, search.data.params
    metrics = [tags.get(schema.METRIC), tags.get(schema.TIMING_TRAIN, schema.STEADY_EPOCH_S), schema.TRIAL_WALL_S]
    # Since schema 6 where a run ran is a param on every run; before, a tag only.
    placement = "params" if schema.PARAM_DEVICE in params else "tags"
    columns = [f"metrics.`{m}`" for m in dict.fromkeys(m for m in metrics if m)]
    # The search's own figures, on its parent run (a trial's row leaves them empty, as a search's leaves the above).
    columns += [f"metrics.`{m}`" for m in SEARCH_COLUMNS]
    columns.append(f"{placement}.`{schema.DEVICE}`")
    columns += [f"params.`{k[len(schema.GRID_PREFIX) :]}`" for k in sorted(params) if k.startswith(schema.GRID_PREFIX)]
    return columns


def save_view(client, experiment_id: str, search) -> None:
    """Writes gridbench's saved view of the runs table on the experiment: unsorted (MLflow nests trials under
    their search only then), every run shown, the comparison's columns chosen."""
    state = {
        "selectedColumns": view_columns(search),
        "runsHiddenMode": "SHOW_ALL",
        "orderByKey": "",
        "orderByAsc": False,
    }
    client.set_experiment_tag(experiment_id, SAVED_VIEW_PREFIX + SAVED_VIEW_KEY, json.dumps(state))


def runs_url(base_url: str, experiment_id: str, saved_view: bool) -> str:
    """The runs page in Model training mode, unsorted so that trials nest under their search."""
    query = "workflowType=machine_learning&compareRunsMode=TABLE"
    if saved_view:
        query += f"&viewStateShareKey={SAVED_VIEW_KEY}"
    return f"{base_url}/#/experiments/{experiment_id}/runs?{query}"


def pages(base_url: str, tracking_uri: str, spec_name: str | None) -> Pages:
    """The named experiment's pages, else those of the experiment whose search started last.

    (MLflow does not update an experiment's last_update_time when runs are added, so the
    experiment is found through its runs.)
    """
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    ours = [e.experiment_id for e in client.search_experiments() if e.name.startswith(experiment_name(""))]
    # A search whose driver was killed outright shows as KILLED, not RUNNING.
    mark_stale_searches(client, ours, tracking_uri)
    if spec_name:
        experiment = client.get_experiment_by_name(experiment_name(spec_name))
        if experiment is None:
            raise UserError(f"no experiment {experiment_name(spec_name)!r} in {tracking_uri}")
        experiment_id = experiment.experiment_id
    else:
        latest = _latest(client, ours, "search")
        if latest is None:
            return Pages(f"{base_url}/")
        experiment_id = latest.info.experiment_id
    search = _latest(client, [experiment_id], "search")
    saved = search is not None and saved_view_supported()
    if saved:
        save_view(client, experiment_id, search)
    reports, compare = [], None
    for kind in ("comparison", "scale"):
        run = _latest(client, [experiment_id], kind)
        if run is not None:
            reports.append(f"{base_url}/#/experiments/{experiment_id}/runs/{run.info.run_id}/artifactPath/report.html")
        if run is not None and kind == "comparison":
            compared = [r for r in run.data.tags.get(schema.COMPARE_RUNS, "").split(",") if r]
            compare = compare_runs_url(base_url, compared, [experiment_id]) if compared else None
    return Pages(runs_url(base_url, experiment_id, saved), tuple(reports), compare, saved)


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


def check_port(port: int) -> int:
    """A port to serve on: 0 picks a free one; a taken one is refused (we never show another server as ours)."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0 (any free port) to 65535, got {port}")
    if port == 0:
        return free_port()
    with socket.socket() as probe:
        try:
            probe.bind((HOST, port))
        except OSError:
            raise UserError(f"port {port} on {HOST} is in use; choose another --port, or 0 for any free one") from None
    return port


def serve(tracking_uri: str | None, port: int, spec_name: str | None) -> int:
    uri = resolve_tracking_uri(tracking_uri)
    if urlparse(uri).scheme in ("http", "https"):
        raise UserError(f"{uri} is a tracking server already; open it in a browser")
    port = check_port(port)
    check_store_exists(uri)  # the server would create an empty store where none is
    base_url = f"http://{HOST}:{port}"
    quiet_mlflow()
    found = pages(base_url, uri, spec_name)
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "PYTHONWARNINGS": "ignore"}
    log = log_path(port)
    print(f"MLflow's own lines (the server's notices and each page it serves) go to {log}", flush=True)
    # Its own process group: the server and the web worker it starts are stopped together.
    with open(log, "ab") as output:
        server = subprocess.Popen(
            server_command(uri, port),
            env=env,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    # SIGTERM and SIGHUP stop the server as Ctrl-C does, rather than leave it running without us.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupt)
    try:
        import requests

        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                raise UserError(
                    f"the MLflow server exited with status {server.returncode}: {_last_line(log)} (all of it in {log})"
                )
            try:
                if requests.get(f"{base_url}/health", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise UserError(f"the MLflow server did not answer on {base_url} within 120 s")
            time.sleep(0.5)
        print(f"MLflow UI for {uri}: {found.runs}", flush=True)
        if found.saved_view:
            print(SHARED_VIEW_NOTE, flush=True)
        else:
            # Without a saved view MLflow keeps the runs table's columns in the browser: say where to choose them.
            print(
                "In the UI: 'Columns' adds test_accuracy, steady_epoch_s, trial_wall_s, the grid's params and "
                "device; keep the table unsorted (or by start time) to see trials nested under their search",
                flush=True,
            )
        if found.compare:
            print(f"compare view (the latest comparison's searches, side by side): {found.compare}", flush=True)
        for report in found.reports:
            print(f"report: {report}", flush=True)
        print("Ctrl-C stops it.", flush=True)
        return _wait_interruptibly(server)
    except KeyboardInterrupt:
        return 0
    finally:
        _stop_group(server)


def log_path(port: int) -> str:
    """The server's log: one per port in the temporary directory, appended to by each `ui` on that port."""
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"gridbench-ui-{port}.log")


def _last_line(path: str) -> str:
    try:
        with open(path, errors="replace") as log:
            lines = [line.strip() for line in log if line.strip()]
    except OSError:
        return "no output"
    return lines[-1][:200] if lines else "no output"


def _wait_interruptibly(server: subprocess.Popen) -> int:
    """server.wait(), in short waits: a Ctrl-C that the kernel hands to another thread of this process (MLflow's
    client starts some) leaves a blocking waitpid in the main thread asleep, and Python's handler never runs
    (a pasted `ui` once ignored its Ctrl-C for a minute). Between short waits the handler runs."""
    while True:
        try:
            return server.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            continue


def _stop_group(server: subprocess.Popen) -> None:
    """Stops the server and the worker it started (its process group, which gridbench made)."""
    for signum, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(server.pid, signum)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
