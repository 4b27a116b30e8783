"""MLflow: the one place gridbench writes results.

Only the driver writes, through MlflowClient: a parent run per search, a nested
child run per trial as soon as the trial ends (so a search that dies later loses
no finished trial), and the search's totals when it ends. The store is checked
before the search starts, so an unusable URI writes nothing.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any, Mapping, Protocol
from urllib.parse import urlparse

from gridbench import disk_space
from gridbench.errors import UserError
from gridbench.tracking import commands, schema
from gridbench.tracking.records import SearchSummary, TrialRecord, param_text
from gridbench.tracking.schema import SearchStatus

EXPERIMENT_PREFIX = "gridbench/"
# MLflow caps a tag value at 8000 characters (5000 in older servers).
_MAX_TAG = 5000


def experiment_name(spec_name: str) -> str:
    return f"{EXPERIMENT_PREFIX}{spec_name}"


def resolve_tracking_uri(uri: str | None) -> str:
    """`--tracking-uri`, else MLFLOW_TRACKING_URI, else MLflow's default (sqlite:///mlflow.db), made absolute.

    Absolute, because Ray runs trials in working directories of its own.
    """
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    parsed = urlparse(uri)
    if parsed.scheme == "sqlite":
        path = uri[len("sqlite:///") :]
        if path != ":memory:" and not path.startswith("/"):
            return f"sqlite:///{Path(path).resolve()}"
        return uri
    if parsed.scheme in ("", "file"):
        return Path(parsed.path if parsed.scheme else uri).expanduser().resolve().as_uri()
    return uri


# What MLflow can write to; a database URI may name its driver ("postgresql+psycopg2").
SUPPORTED_SCHEMES = ("sqlite", "file", "http", "https", "postgresql", "mysql", "mssql", "databricks")
_SQLITE_HEADER = b"SQLite format 3\x00"


def check_tracking_uri(uri: str) -> None:
    """Raises a UserError if the store cannot be written; writes nothing itself (a probe file is removed).

    Every check takes at most seconds (an HTTP server gets 5 s), so that a bad URI is
    refused before Ray starts rather than after minutes of MLflow's retries.
    """
    parsed = urlparse(uri)
    if parsed.scheme.split("+")[0] not in SUPPORTED_SCHEMES:
        raise UserError(
            f"tracking URI {uri}: unsupported scheme {parsed.scheme + ':' if parsed.scheme else '(none)'}; use "
            f"--tracking-uri sqlite:///PATH, http(s)://HOST:PORT (an MLflow server) or a database URI (postgresql://)"
        )
    if parsed.scheme == "sqlite":
        path = Path(uri[len("sqlite:///") :])
        if str(path) == ":memory:":
            return
        if path.exists():
            if not path.is_file():
                raise UserError(f"tracking URI {uri}: {path} is not a file; choose another --tracking-uri")
            _check_sqlite_store(uri, path)
        _check_writable_directory(uri, path.parent)  # also for an existing store: room for SQLite's journal and runs
    elif parsed.scheme == "file":
        if os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
            raise UserError(
                f"tracking URI {uri} is a file store, which MLflow 3 refuses; use "
                f"--tracking-uri sqlite:///{Path(parsed.path) / 'mlflow.db'} (or set MLFLOW_ALLOW_FILE_STORE=true)"
            )
        path = Path(parsed.path)
        existing = next(p for p in (path, *path.parents) if p.exists())
        if not existing.is_dir() or not os.access(existing, os.W_OK):
            raise UserError(
                f"tracking URI {uri}: {existing} is not a writable directory; choose another --tracking-uri"
            )
    elif parsed.scheme in ("http", "https"):
        import requests

        try:
            response = requests.get(f"{uri.rstrip('/')}/health", timeout=5)
            response.raise_for_status()
        except requests.RequestException as err:
            raise UserError(
                f"tracking server {uri} does not answer ({type(err).__name__}); start it or fix --tracking-uri"
            ) from None


def _check_writable_directory(uri: str, directory: Path) -> None:
    """Writes, syncs and removes a probe of real bytes: os.access says yes to root even on a read-only file
    system, and an empty file is created even on a full one."""
    if not directory.is_dir():
        raise UserError(
            f"tracking URI {uri}: directory {directory} does not exist; create it or choose another --tracking-uri"
        )
    try:
        disk_space.probe(directory)
    except OSError as err:
        if disk_space.is_out_of_space(err):
            raise disk_space.no_room(directory, "the MLflow store", "choose another --tracking-uri") from None
        raise UserError(
            f"tracking URI {uri}: cannot write in {directory} ({err.strerror}); choose another --tracking-uri"
        ) from None


def _tables(path: Path, mode: str) -> set[str]:
    import sqlite3

    with sqlite3.connect(f"{path.as_uri()}?mode={mode}", uri=True, timeout=5) as connection:
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    connection.close()
    return tables


def _check_sqlite_store(uri: str, path: Path, write: bool = True) -> None:
    """An existing file must be writable (unless not `write`) and an SQLite database that is empty or MLflow's
    (read, never changed)."""
    import sqlite3

    try:
        with open(path, "r+b" if write else "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError as err:
        raise UserError(
            f"tracking URI {uri}: cannot write {path} ({err.strerror}); choose another --tracking-uri"
        ) from None
    if header and header != _SQLITE_HEADER:  # an empty file is an empty database to SQLite
        raise UserError(f"tracking URI {uri}: {path} is not an SQLite database; choose another --tracking-uri")
    try:
        try:
            tables = _tables(path, "ro")
        except sqlite3.OperationalError as err:
            # A process killed mid-write (a driver that Ray ended) leaves a hot journal, which only a connection
            # that may write rolls back; where writing is allowed, that one reads the tables.
            if not write or "readonly" not in str(err):
                raise
            tables = _tables(path, "rw")
    except sqlite3.DatabaseError as err:
        raise UserError(
            f"tracking URI {uri}: {path} is not a readable SQLite database ({err}); choose another --tracking-uri"
        ) from None
    if tables and not {"alembic_version", "experiments"} <= tables:
        raise UserError(
            f"tracking URI {uri}: {path} is an SQLite database but not an MLflow store; choose another --tracking-uri"
        )


def open_client(tracking_uri: str):
    """An MlflowClient; a new SQLite store is created under a lock beside it.

    MLflow creates a new store's tables on first open, and two processes doing so at
    once fail (alembic: "expected to match one row"); the lock makes the second wait.
    """
    from mlflow import MlflowClient

    quiet_mlflow()
    if urlparse(tracking_uri).scheme != "sqlite" or tracking_uri.endswith(":memory:"):
        return MlflowClient(tracking_uri)
    from filelock import FileLock

    with FileLock(f"{tracking_uri[len('sqlite:///') :]}.lock", timeout=120):
        return MlflowClient(tracking_uri)


def check_store_exists(uri: str) -> None:
    """For commands that read a store: it must be usable and, for SQLite, already there.

    Read, never written: an archived store or another user's, whose file and directory are
    read-only, is read as it is (report, compare, ui).
    """
    if urlparse(uri).scheme != "sqlite" or uri.endswith(":memory:"):
        check_tracking_uri(uri)
        return
    path = Path(uri[len("sqlite:///") :])
    if not path.is_file():
        # Opening a missing SQLite store would create an empty one.
        raise UserError(f"no MLflow store at {uri}; run a search first, or pass --tracking-uri")
    try:
        with open(path, "rb") as file:
            header = file.read(len(_SQLITE_HEADER))
    except OSError as err:
        raise UserError(f"tracking URI {uri}: cannot read {path} ({err.strerror}); check its permissions") from None
    if header != _SQLITE_HEADER:
        raise UserError(f"tracking URI {uri}: {path} is not an SQLite database; choose another --tracking-uri")
    _check_sqlite_store(uri, path, write=False)


def store_writable(uri: str) -> bool:
    """Whether this process can write the store (for SQLite: its file and directory); others are taken as yes."""
    if urlparse(uri).scheme != "sqlite" or uri.endswith(":memory:"):
        return True
    try:
        check_tracking_uri(uri)
    except UserError:
        return False
    return True


def artifact_location(uri: str) -> str | None:
    """For a local SQLite store, artifacts go to mlruns/ beside the database (MLflow's own layout)."""
    if urlparse(uri).scheme == "sqlite":
        return (Path(uri[len("sqlite:///") :]).parent / "mlruns").as_uri()
    return None


def ui_command(uri: str, timeout_s: float = 2.0) -> str:
    """How to browse the store: open a tracking server that answers, else gridbench's own UI over the file."""
    if urlparse(uri).scheme in ("http", "https"):
        import requests

        try:
            requests.get(uri, timeout=timeout_s)
        except requests.RequestException:  # gone for good mid-search: the journal holds what it lacks
            return f"the tracking server {uri} does not answer now; open it once it is back"
        return f"open {uri}"
    return commands.ui_command(uri)  # MLflow's UI without its job runner


def quiet_mlflow() -> None:
    # MLflow logs database migrations at INFO; the terminal has a progress bar.
    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # A failed SQL statement is logged with its traceback before MLflow raises it: gridbench reports the
    # error itself, in one line (a full disk once printed 30 tracebacks as the writer retried).
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    # Against a tracking server MLflow writes two lines of links to stdout for every run it ends
    # (2,000 lines for `gridbench sync` of a 1,000-trial journal), after one more request to the server.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def _text(value: Any) -> str:
    return str(value)[:_MAX_TAG]


class Recorder(Protocol):
    """Where a search's records go: MLflow (MlflowRecorder), or memory (gridbench.tracking.memory_recorder: tests)."""

    experiment_name: str
    parent_run_id: str | None

    def start(
        self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str], documents: Mapping[str, Any]
    ) -> str: ...
    def record_trial(self, trial: TrialRecord, params: Mapping[str, Any], tags: Mapping[str, str]) -> str: ...
    def finish(self, summary: SearchSummary | None, status: SearchStatus, error: str | None = None) -> None: ...
    def resume(self, parent_run_id: str, tags: Mapping[str, str]) -> None:
        """Continues a search: its parent RUNNING again, `tags` (the driver's) updated; trials then go under it."""
        ...


class MlflowRecorder:
    """Writes one search to MLflow: the parent run, each trial as a nested run, the totals."""

    def __init__(self, tracking_uri: str, spec_name: str):
        self.tracking_uri = tracking_uri
        self.client = open_client(tracking_uri)
        self.experiment_name = experiment_name(spec_name)
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None

    def start(
        self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str], documents: Mapping[str, Any]
    ) -> str:
        self.experiment_id = self.ensure_experiment()
        tags = {**tags, schema.SCHEMA: str(schema.SCHEMA_VERSION)}
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags={k: _text(v) for k, v in tags.items()})
        self.parent_run_id = run.info.run_id
        self.log_values(self.parent_run_id, params=params)
        for name, document in documents.items():
            self.client.log_dict(self.parent_run_id, document, name)
        return self.parent_run_id

    def ensure_experiment(self) -> str:
        """The experiment's id, created if new (and found if another search created it a moment before)."""
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(self.experiment_name)
        if experiment is not None:
            return experiment.experiment_id
        try:
            return self.client.create_experiment(
                self.experiment_name, artifact_location=artifact_location(self.tracking_uri)
            )
        except MlflowException as err:
            if err.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.client.get_experiment_by_name(self.experiment_name).experiment_id

    def record_trial(self, trial: TrialRecord, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """One nested run per trial, written the moment the trial ends."""
        run = self.client.create_run(
            self.experiment_id,
            start_time=int(trial.started_at * 1000),
            run_name=f"{trial.key} #{trial.repeat}",
            tags={
                schema.PARENT_RUN: self.parent_run_id,
                schema.SCHEMA: str(schema.SCHEMA_VERSION),
                schema.TRIAL_ID: trial.trial_id,
                schema.CONFIG_KEY: trial.key,
                **{k: _text(v) for k, v in {**tags, **trial.tags}.items()},
                **({schema.ERROR: _text(trial.error)} if trial.error else {}),
            },
        )
        run_id = run.info.run_id
        # The timings first: MLflow's compare view charts a run's first metric by default (else import_s).
        first = {k: trial.metrics[k] for k in (schema.STEADY_EPOCH_S, schema.TRIAL_WALL_S) if k in trial.metrics}
        metrics = {**first, **trial.metrics}
        self.log_values(run_id, params={**params, **trial.config, schema.PARAM_REPEAT: trial.repeat}, metrics=metrics)
        if trial.epoch_times:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            self.client.log_batch(
                run_id, metrics=[Metric(schema.EPOCH_S, t, now, step) for step, t in enumerate(trial.epoch_times)]
            )
        if trial.traceback:
            self.client.log_text(run_id, trial.traceback, "error.txt")
        self.client.set_terminated(run_id, status=trial.status.value, end_time=int(trial.ended_at * 1000))
        return run_id

    def resume(self, parent_run_id: str, tags: Mapping[str, str]) -> None:
        run = self.client.get_run(parent_run_id)
        self.experiment_id, self.parent_run_id = run.info.experiment_id, parent_run_id
        if schema.ERROR in run.data.tags:  # the last session's; this one says its own when it ends
            self.client.delete_tag(parent_run_id, schema.ERROR)
        # The journal tags name this session's journal: earlier sessions' were synced before it (search --resume).
        for key in (schema.DRIVER_HOST, schema.DRIVER_PID, schema.DRIVER_STARTED, schema.COMMAND,
                    schema.JOURNAL_PATH, schema.JOURNAL_ID):  # fmt: skip
            if key in tags:
                self.client.set_tag(parent_run_id, key, _text(tags[key]))
        self.client.update_run(parent_run_id, status=SearchStatus.RUNNING.value)

    def finish(self, summary: SearchSummary | None, status: SearchStatus, error: str | None = None) -> None:
        if self.parent_run_id is None:
            return
        if summary is not None:
            # Each session's totals at its own step: a resumed search keeps every session's makespan.
            self.log_values(self.parent_run_id, metrics=summary.metrics(), step=summary.session - 1)
        if error:
            self.client.set_tag(self.parent_run_id, schema.ERROR, _text(error))
        self.client.set_terminated(self.parent_run_id, status=status.value)

    def log_values(
        self,
        run_id: str,
        params: Mapping[str, Any] | None = None,
        metrics: Mapping[str, float] | None = None,
        step: int = 0,
    ) -> None:
        from mlflow.entities import Metric, Param

        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id,
            params=[Param(k, _text(param_text(v))) for k, v in (params or {}).items()],
            metrics=[Metric(k, float(v), now, step) for k, v in (metrics or {}).items()],
        )


def record_comparison(
    tracking_uri: str,
    spec_name: str,
    run_ids: list[str],
    metrics: Mapping[str, float],
    tags: Mapping[str, str],
    files: Mapping[str, Path],
) -> str:
    """The comparison as its own run, linked to the searches it compares (tags both ways)."""
    run_name = f"compare {' vs '.join(tags.get(f'search.{i}', rid[:8]) for i, rid in enumerate(run_ids))}"
    tags = {schema.COMPARE_BASELINE: run_ids[0], schema.COMPARE_RUNS: ",".join(run_ids), **tags}
    return record_summary(tracking_uri, spec_name, "comparison", run_name, run_ids, metrics, tags, files)


def record_summary(
    tracking_uri: str,
    spec_name: str,
    kind: str,
    run_name: str,
    run_ids: list[str],
    metrics: Mapping[str, float],
    tags: Mapping[str, str],
    files: Mapping[str, Path],
) -> str:
    """A run that sums up searches (a comparison, a scale), linked to them both ways:
    it lists them, and each gets a gridbench.<kind> tag naming it."""
    quiet_mlflow()
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name(spec_name))
    run = client.create_run(
        experiment.experiment_id,
        run_name=run_name,
        tags={
            schema.KIND: kind,
            schema.SCHEMA: str(schema.SCHEMA_VERSION),
            **{k: _text(v) for k, v in tags.items()},
        },
    )
    run_id = run.info.run_id
    try:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
        for name, path in files.items():
            client.log_artifact(run_id, str(path), artifact_path=str(Path(name).parent) if "/" in name else None)
        link = {"comparison": schema.COMPARED_IN, "scale": schema.SCALE_RUN}[kind]
        for search_id in run_ids:
            client.set_tag(search_id, link, run_id)
        client.set_terminated(run_id, status=SearchStatus.FINISHED.value)
    except BaseException:
        client.set_terminated(run_id, status=SearchStatus.FAILED.value)
        raise
    return run_id
