"""A Recorder that journals every record, then writes the store from a thread of its own.

    record_trial (Tune's callback thread): journal line + fsync, then a queue -> writer thread -> MLflow

So a slow or absent store never holds up Tune: a search's makespan holds only the
journal's fsync (recorded as `journal_write_s`), and the store's cost is recorded
apart (`store_write_s`, `store_lag_max_s`, `store_retries`). A store that does not
answer is retried with backoff while the search runs (the journal already holds every
record); a record the store refuses outright (HTTP 4xx) is tried 3 times. Once the
search ends, the writer gives the store GRIDBENCH_STORE_GRACE_S (default 30 s) without
progress, then stops and prints one line: where the journal is and the `gridbench sync`
command that writes what the store lacks.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from typing import Any, Callable, Mapping

from gridbench import disk_space
from gridbench.disk_space import OutOfSpace
from gridbench.errors import UserError
from gridbench.tracking import commands, schema
from gridbench.tracking.journal import Journal, journal_dir, summary_to_dict, trial_to_dict
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder
from gridbench.tracking.sync import ensure_finish, ensure_parent, ensure_trial, remove_duplicates

GRACE_ENV = "GRIDBENCH_STORE_GRACE_S"
_BACKOFF_S = (0.5, 1.0, 2.0, 4.0)  # then every 4 s
_REFUSED_ATTEMPTS = 3  # a record the store refuses outright; one that does not answer is retried until the end


def open_journaled_recorder(tracking_uri: str, spec_name: str) -> JournaledRecorder:
    """The search's recorder: MLflow behind a journal (run_search's default)."""
    # MLflow's own HTTP retries (7, up to 120 s each) would stall the writer for minutes
    # per record; the writer retries itself. A user's own settings win.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    journal = Journal.create(journal_dir(tracking_uri), spec_name)
    return JournaledRecorder(MlflowRecorder(tracking_uri, spec_name), journal)


class JournaledRecorder:
    """Wraps an MlflowRecorder: the same calls, journaled first, written to the store off the caller's thread."""

    def __init__(self, store: MlflowRecorder, journal: Journal, grace_s: float | None = None):
        self.store = store
        self.journal = journal
        self.experiment_name = store.experiment_name
        self.grace_s = float(os.environ.get(GRACE_ENV, 30)) if grace_s is None else grace_s
        self._queue: queue.Queue = queue.Queue()
        self._writer = threading.Thread(target=self._write_all, name="gridbench-store-writer", daemon=True)
        self._ending = threading.Event()  # the search has ended: give up once the store makes no progress
        self._written_all = threading.Event()
        self._last_progress = time.monotonic()
        self._start_args: dict[str, Any] | None = None
        self._finish_lock = threading.Lock()
        self._finish_journaled = False
        # What recording cost, for the parent run.
        self.journal_write_s = 0.0
        self.store_write_s = 0.0
        self.store_lag_max_s = 0.0
        self.store_retries = 0
        self.unwritten = 0  # trials only in the journal
        self.finish_unwritten = False
        self.last_error: str | None = None
        # Out of space (gridbench.disk_space.OutOfSpace) in the journal or the store: the search should stop
        # (RecordingCallback asks); the store is not retried, what it lacks stays in the journal.
        self.fault: OutOfSpace | None = None
        self.unjournaled: set[str] = set()  # trial ids whose journal line could not be written
        self.lost = 0  # trials in neither the journal nor the store
        self.announce_unsynced = True  # finish prints the sync hint (run_search says it itself after a fault)

    @property
    def parent_run_id(self) -> str | None:
        return self.store.parent_run_id

    def __getattr__(self, name: str):
        # Anything else a caller asks of the store (read-only facts such as experiment_id).
        if name == "store":  # not set yet (unpickling, or __init__ failed)
            raise AttributeError(name)
        return getattr(self.store, name)

    def start(
        self, run_name: str, params: Mapping[str, Any], tags: Mapping[str, str], documents: Mapping[str, Any]
    ) -> str:
        """Creates the parent run now (its trials' records need its id); the store was opened moments before."""
        tags = {**tags, schema.JOURNAL_PATH: str(self.journal.path), schema.JOURNAL_ID: self.journal.id}
        self._start_args = {"run_name": run_name, "params": dict(params), "tags": tags, "documents": dict(documents)}
        self.journal.append(
            "start",
            journal_id=self.journal.id,
            tracking_uri=self.store.tracking_uri,
            experiment_name=self.experiment_name,
            **self._start_args,
        )
        deadline = time.monotonic() + self.grace_s
        for attempt in range(len(_BACKOFF_S) + 1):
            try:
                ensure_parent(self.store, self._start_args, self.journal.id, known_run_id=None)
                break
            except Exception as err:  # noqa: BLE001 - any store failure: MLflow, HTTP, SQLAlchemy
                self.last_error = _describe(err)
                if attempt == len(_BACKOFF_S) or time.monotonic() > deadline:
                    raise UserError(
                        f"the store {self.store.tracking_uri} stopped answering as the search began "
                        f"({self.last_error}); nothing was recorded; try again once it answers"
                    ) from None
                time.sleep(backoff_s(attempt))
        self.journal.append("parent", run_id=self.store.parent_run_id, experiment_id=self.store.experiment_id)
        self._writer.start()
        return self.store.parent_run_id

    def resume(self, parent_run_id: str, tags: Mapping[str, str]) -> None:
        """Continues a search (--resume): its parent RUNNING again; this session's journal names that parent."""
        tags = {**tags, schema.JOURNAL_PATH: str(self.journal.path), schema.JOURNAL_ID: self.journal.id}
        self.store.resume(parent_run_id, tags)
        self._start_args = {"run_name": "", "params": {}, "tags": dict(tags), "documents": {}}
        self.journal.append(
            "start",
            journal_id=self.journal.id,
            tracking_uri=self.store.tracking_uri,
            experiment_name=self.experiment_name,
            resumed=parent_run_id,
            **self._start_args,
        )
        self.journal.append("parent", run_id=parent_run_id, experiment_id=self.store.experiment_id)
        self._writer.start()

    def record_trial(self, trial: TrialRecord, params: Mapping[str, Any], tags: Mapping[str, str]) -> str:
        """Journals the trial (on disk when this returns) and queues its store write; returns its trial id."""
        try:
            self.journal_write_s += self.journal.append(
                "trial", record=trial_to_dict(trial), params=dict(params), tags=dict(tags)
            )
        except OutOfSpace as err:  # the store may still take it; the search stops (RecordingCallback)
            self._note_fault(err)
            self.unjournaled.add(trial.trial_id)
        journaled_at = time.monotonic()

        def write(check_first: bool) -> None:
            ensure_trial(self.store, trial, params, tags, check_first)
            self.store_lag_max_s = max(self.store_lag_max_s, time.monotonic() - journaled_at)

        self._queue.put(("trial", write, trial.trial_id))
        return trial.trial_id

    def _note_fault(self, err: OutOfSpace) -> None:
        if self.fault is None:
            self.fault = err

    def finish(self, summary: SearchSummary | None, status: SearchStatus, error: str | None = None) -> None:
        """Waits for the store writes (at most the grace without progress), then journals and writes the end."""
        if self.store.parent_run_id is None:  # the store never had the search
            self._journal_finish(summary, status, error)
            self.journal.close()
            return
        self._queue.put(("finish", (summary, status, error), None))
        self._queue.put(None)
        self._last_progress = time.monotonic()
        self._ending.set()
        try:
            while not self._written_all.wait(0.2):
                if not self._writer.is_alive():
                    break
        finally:
            self._journal_finish(summary, status, error)  # if the writer did not get to it (interrupted)
            self.journal.close()
            hint = self.unsynced_hint()
            if hint and self.announce_unsynced:
                print(f"gridbench: {hint}", file=sys.stderr, flush=True)

    def unsynced_hint(self) -> str | None:
        """One line when the store lacks part of the search: where the journal is and how to replay it."""
        if not self._written_all.is_set():  # interrupted, or the writer died
            lacking = "it may lack trials or the search's totals"
        elif self.unwritten or self.finish_unwritten:
            parts = [f"{self.unwritten} trial(s)"] if self.unwritten else []
            parts += ["the search's totals"] if self.finish_unwritten else []
            lacking = f"{' and '.join(parts)} are only in the journal"
        else:
            return None
        if self.lost:
            lacking += f" ({self.lost} trial(s) in neither, for lack of space: --resume trains them again)"
        return (
            f"the store {self.store.tracking_uri} did not take every record ({self.last_error or 'stopped'}); "
            f"{lacking}; write them with: {self.sync_command()}"
        )

    def sync_command(self) -> str:
        return commands.sync_command(str(self.journal.path), self.store.tracking_uri)

    def store_metrics(self) -> dict[str, float]:
        return {
            schema.JOURNAL_WRITE_S: self.journal_write_s,
            schema.STORE_WRITE_S: self.store_write_s,
            schema.STORE_LAG_MAX_S: self.store_lag_max_s,
            schema.STORE_RETRIES: float(self.store_retries),
        }

    def _journal_finish(self, summary, status, error) -> None:
        with self._finish_lock:  # the writer thread, or the main thread if the writer never got there
            if self._finish_journaled:
                return
            self._finish_journaled = True
            try:
                self.journal.append(
                    "finish", summary=summary_to_dict(summary), store_metrics=self.store_metrics(),
                    status=status.value, error=error,
                )  # fmt: skip
            except OutOfSpace as err:  # the totals go to the store alone, if it takes them
                self._note_fault(err)

    def _write_finish(self, summary, status, error, check_first: bool) -> None:
        ensure_finish(self.store, summary, self.store_metrics(), status, error, check_first)
        if self.store_retries:  # a retried write may have reached the store twice
            remove_duplicates(self.store)

    def _write_all(self) -> None:
        """The writer thread: each queued write in order, retried with backoff; never raises."""
        store_down = False
        try:
            while (item := self._queue.get()) is not None:
                kind, payload, trial_id = item
                if kind == "finish":
                    self._journal_finish(*payload)  # the trials' store costs are known now
                    write = lambda check_first, payload=payload: self._write_finish(*payload, check_first)  # noqa: E731
                else:
                    write = payload
                if store_down:
                    self._count_unwritten(kind, trial_id)
                elif not self._write_one(kind, write):
                    # The search has ended and the store made no progress for the grace, or the store is full.
                    store_down = True
                    self._count_unwritten(kind, trial_id)
        finally:
            self._written_all.set()

    def _write_one(self, kind: str, write: Callable[[bool], None]) -> bool:
        attempt = 0
        while True:
            started = time.perf_counter()
            try:
                write(attempt > 0)
                if kind == "trial":
                    self.store_write_s += time.perf_counter() - started
                self._last_progress = time.monotonic()
                return True
            except Exception as err:  # noqa: BLE001 - any store failure; the journal has the record
                if kind == "trial":
                    self.store_write_s += time.perf_counter() - started
                self.store_retries += 1
                self.last_error = _describe(err)
                if disk_space.is_out_of_space(err):  # no retry storm: a full store stays full; the journal has the rest
                    self._note_fault(disk_space.OutOfSpace(_store_location(self.store.tracking_uri), None, "the store"))
                    return False
                if _refused(err) and attempt + 1 >= _REFUSED_ATTEMPTS:
                    # The store answers but refuses this record: later ones may still go in.
                    self._count_unwritten(kind, None)
                    self._last_progress = time.monotonic()
                    return True
            if self._ending.is_set() and time.monotonic() - self._last_progress > self.grace_s:
                return False
            time.sleep(backoff_s(attempt))
            attempt += 1

    def _count_unwritten(self, kind: str, trial_id: str | None) -> None:
        if kind == "trial":
            self.unwritten += 1
            self.lost += trial_id in self.unjournaled
        else:
            self.finish_unwritten = True


def backoff_s(attempt: int) -> float:
    """The wait after failed attempt `attempt` (from 0), for both of the writer's retries: 0.5, 1, 2, 4 s, then 4 s."""
    return _BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)]


def _refused(err: BaseException) -> bool:
    """The store answered and said no (HTTP 4xx: a bad value, say), as opposed to not answering."""
    from mlflow.exceptions import MlflowException

    return isinstance(err, MlflowException) and 400 <= err.get_http_status_code() < 500


def _store_location(tracking_uri: str) -> str:
    """The store's database file for a local SQLite store, else its URI."""
    return tracking_uri[len("sqlite:///") :] if tracking_uri.startswith("sqlite:///") else tracking_uri


def _describe(err: BaseException) -> str:
    first = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return f"{type(err).__name__}: {shorten(first, 160)}" if first else type(err).__name__


def shorten(text: str, limit: int) -> str:
    """`text` within `limit` characters, cut at a word and marked with "..." (never mid-word, never a lone ")")."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:(")
    return f"{cut}..."
