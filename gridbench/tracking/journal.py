"""The journal: a search's records in a local file, each appended and fsynced before the store is written.

One JSON object per line, in order: `start` (what the parent run is made of), `parent`
(the run id the store gave it), one `trial` per trial record, `finish` (the totals and
how the search ended). Whatever then happens to the store or the driver, nothing
measured is lost: `gridbench sync JOURNAL` writes what the store lacks.

Where: `$GRIDBENCH_JOURNAL_DIR`; else `gridbench-journal/` beside a local store (SQLite
database or file store); else `$XDG_STATE_HOME/gridbench/journal` (by default
`~/.local/state/gridbench/journal`). Journals are kept: a few KB per trial.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

from gridbench import disk_space
from gridbench.errors import UserError
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus

FORMAT_VERSION = 1
JOURNAL_DIR_ENV = "GRIDBENCH_JOURNAL_DIR"


def journal_dir(tracking_uri: str) -> Path:
    """Where a search on this store keeps its journal (see the module's docstring)."""
    if os.environ.get(JOURNAL_DIR_ENV):
        return Path(os.environ[JOURNAL_DIR_ENV]).expanduser().resolve()
    parsed = urlparse(tracking_uri)
    if parsed.scheme == "sqlite" and not tracking_uri.endswith(":memory:"):
        return Path(tracking_uri[len("sqlite:///") :]).parent / "gridbench-journal"
    if parsed.scheme == "file":
        return Path(parsed.path).parent / "gridbench-journal"
    state = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(state) / "gridbench" / "journal"


def check_journal_dir(tracking_uri: str) -> None:
    """Refuses, before anything runs, a journal directory that cannot be created or take real bytes."""
    directory = journal_dir(tracking_uri)
    fix = f"set {JOURNAL_DIR_ENV} to a writable directory"
    try:
        disk_space.probe_directory(directory)  # leaves no directory behind if it fails
    except OSError as err:
        if disk_space.is_out_of_space(err):
            raise disk_space.no_room(directory, "the search's journal", fix) from None
        raise UserError(f"cannot write the search's journal in {directory} ({err.strerror}); {fix}") from None


class Journal:
    """An append-only JSON-lines file; `append` returns once the line is on disk (fsync).

    A line is written whole or not at all: one that could not be written in full (a full
    disk) is cut off again, and `append` raises OutOfSpace (gridbench.disk_space) or the OSError.
    """

    def __init__(self, path: Path, journal_id: str):
        self.path = path
        self.id = journal_id
        self._lock = threading.Lock()  # Tune's callback thread and the driver's main thread both append
        self._fd: int | None = None

    @classmethod
    def create(cls, directory: Path, spec_name: str) -> Journal:
        journal_id = uuid.uuid4().hex
        safe_name = re.sub(r"[^\w.-]+", "_", spec_name)[:60]
        stamp = time.strftime("%Y%m%dT%H%M%S")
        directory.mkdir(parents=True, exist_ok=True)
        return cls(directory / f"{safe_name}-{stamp}-{journal_id[:8]}.jsonl", journal_id)

    def append(self, event: str, **fields: Any) -> float:
        """Writes one event and syncs it to disk; returns the seconds that took."""
        started = time.perf_counter()
        line = json.dumps({"v": FORMAT_VERSION, "event": event, "time": time.time(), **fields}, default=_plain)
        with self._lock:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._write_whole((line + "\n").encode("utf-8"))
        return time.perf_counter() - started

    def _write_whole(self, data: bytes) -> None:
        start = os.fstat(self._fd).st_size
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fsync(self._fd)
        except OSError as err:
            try:
                os.ftruncate(self._fd, start)  # no torn line: the journal ends with the last whole one
            except OSError:
                pass
            if disk_space.is_out_of_space(err):
                raise disk_space.OutOfSpace(self.path, len(data), "the search's journal") from None
            raise

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    os.close(self._fd)
                except OSError:  # every line was synced when written: nothing is lost
                    pass
                self._fd = None


def _plain(value: Any) -> Any:
    # NumPy scalars in a workload's metrics or tags.
    return value.item() if hasattr(value, "item") else str(value)


def trial_to_dict(record: TrialRecord) -> dict[str, Any]:
    return {**asdict(record), "status": record.status.value, "epoch_times": list(record.epoch_times)}


def trial_from_dict(values: Mapping[str, Any]) -> TrialRecord:
    return TrialRecord(**{**values, "epoch_times": tuple(values.get("epoch_times", ()))})


def summary_to_dict(summary: SearchSummary | None) -> dict[str, Any] | None:
    return None if summary is None else asdict(summary)


def summary_from_dict(values: Mapping[str, Any] | None) -> SearchSummary | None:
    return None if values is None else SearchSummary(**values)


@dataclass
class JournaledTrial:
    record: TrialRecord
    params: dict[str, Any]
    tags: dict[str, str]


@dataclass(frozen=True)
class BadLine:
    """A journal line that could not be read: skipped, and named by its number (from 1)."""

    number: int
    why: str


@dataclass
class JournalContents:
    """A journal read back: enough to write its search to any store."""

    path: Path
    id: str
    tracking_uri: str
    experiment_name: str
    start: dict[str, Any]  # run_name, params, tags, documents
    parent_run_id: str | None = None
    trials: list[JournaledTrial] = field(default_factory=list)
    finish: dict[str, Any] | None = None  # summary, store_metrics, status, error
    # Lines that could not be read (cut short by a crash mid-write, damaged): each skipped.
    bad_lines: list[BadLine] = field(default_factory=list)
    resumed: str | None = None  # the parent run this session continued (search --resume)

    @property
    def torn_lines(self) -> int:
        return len(self.bad_lines)

    def bad_lines_note(self, most: int = 5) -> str:
        """'2 unreadable line(s) skipped (line 3: not JSON; line 7: a trial line without its record)'; '' if none."""
        if not self.bad_lines:
            return ""
        named = "; ".join(f"line {bad.number}: {bad.why}" for bad in self.bad_lines[:most])
        more = f"; {len(self.bad_lines) - most} more" if len(self.bad_lines) > most else ""
        return f"{len(self.bad_lines)} unreadable line(s) skipped ({named}{more})"


def read_journal(path: str | Path) -> JournalContents:
    """Reads a journal; a UserError if the file is missing or is not a gridbench journal.

    Any other line that cannot be read (cut short, not UTF-8, not JSON, an event without what it
    needs) is skipped and named in `bad_lines`: a damaged line never stops a sync, a report or the UI.
    """
    path = Path(path).expanduser().resolve()
    try:
        data = path.read_bytes()
    except OSError as err:
        raise UserError(
            f"journal {path}: cannot read it ({err.strerror}); give a file from gridbench-journal/"
        ) from None
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()  # the newline that ends the last line
    events, bad = [], []
    for number, line in enumerate(lines, start=1):
        event, why = _event(line)
        if why is None:
            events.append((number, event))
        else:
            bad.append(BadLine(number, why))
    contents = _contents(path, events[0][1] if events and events[0][0] == 1 else None)
    contents.bad_lines = bad
    for number, event in events[1:]:
        why = _add_event(contents, event)
        if why is not None:
            contents.bad_lines.append(BadLine(number, why))
    contents.bad_lines.sort(key=lambda bad_line: bad_line.number)
    return contents


def _event(line: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """A line's event, or why it is none."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "bytes that are not UTF-8"
    try:
        event = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return None, "not JSON (cut short or damaged)"
    if not isinstance(event, dict) or not isinstance(event.get("event"), str):
        return None, "not a journal event"
    return event, None


def _contents(path: Path, first: dict[str, Any] | None) -> JournalContents:
    """The journal's start, from its first line (a UserError where it is not one)."""
    not_journal = f"{path} is not a gridbench journal (it must begin with a search's start); check the path"
    if first is None or first.get("event") != "start":
        raise UserError(not_journal)
    version = first.get("v", 0)
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise UserError(f"journal {path} has format {version}, newer than this gridbench reads; upgrade gridbench")
    try:
        return JournalContents(
            path=path,
            id=str(first["journal_id"]),
            tracking_uri=str(first["tracking_uri"]),
            experiment_name=str(first["experiment_name"]),
            start={k: first[k] for k in ("run_name", "params", "tags", "documents")},
            resumed=first.get("resumed"),
        )
    except KeyError:
        raise UserError(not_journal) from None


def _add_event(contents: JournalContents, event: dict[str, Any]) -> str | None:
    """Adds one event to the contents; returns why it cannot be read, or None."""
    kind = event["event"]
    if kind == "parent":
        if not isinstance(event.get("run_id"), str) or not event["run_id"]:
            return "a parent line without its run id"
        contents.parent_run_id = event["run_id"]
    elif kind == "trial":
        record, params, tags = event.get("record"), event.get("params", {}), event.get("tags", {})
        if not isinstance(record, dict) or not record:
            return "a trial line without its record"
        if not isinstance(params, dict) or not isinstance(tags, dict):
            return "a trial line without its params or tags"
        try:
            contents.trials.append(JournaledTrial(trial_from_dict(record), params, tags))
        except (TypeError, ValueError, KeyError, AttributeError) as err:
            return f"a trial line whose record cannot be read ({type(err).__name__})"
    elif kind == "finish":
        finish = {k: event.get(k) for k in ("summary", "store_metrics", "status", "error")}
        try:
            SearchStatus(finish["status"])
            summary_from_dict(finish["summary"])
        except (TypeError, ValueError, KeyError):
            return "a finish line that cannot be read"
        if not isinstance(finish["store_metrics"] or {}, dict):
            return "a finish line that cannot be read"
        contents.finish = finish
    return None
