"""The journal and the store writer: every record journaled first, store writes off the caller's thread,
outages ridden out, and `gridbench sync` replaying a journal exactly once. A real SQLite MLflow store;
outages are a client that raises while "down" (the end-to-end outage tests are in test_store_outage.py)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from clocks import VirtualClock
from stores import new_store

from gridbench.cli import main
from gridbench.errors import UserError
from gridbench.tracking import journaled as journaled_module
from gridbench.tracking import schema
from gridbench.tracking.journal import Journal, read_journal
from gridbench.tracking.journaled import JournaledRecorder, backoff_s
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder
from gridbench.tracking.sync import sync_journal


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite store for the module (creating one takes seconds); each test has a search of its own in it."""
    return new_store(tmp_path_factory.mktemp("store"))


class Outage:
    """Wraps an MlflowClient: while `down`, every call raises as an unreachable server would.

    `lost_replies`: that many create_run calls reach the store but raise (a timeout after the server acted).
    """

    def __init__(self, client):
        self.client, self.down, self.lost_replies, self.calls, self.refused = client, False, 0, 0, 0
        self.threads: set[str] = set()  # the threads that called the store
        self.refused_run_name: str | None = None  # create_run of this name is refused (HTTP 400)

    def __getattr__(self, name):
        method = getattr(self.client, name)

        def call(*args, **kwargs):
            self.calls += 1
            self.threads.add(threading.current_thread().name)
            if self.down:
                self.refused += 1
                raise ConnectionError("Connection refused")
            if name == "create_run" and kwargs.get("run_name") == self.refused_run_name:
                from mlflow.exceptions import MlflowException
                from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

                raise MlflowException("Invalid value for tag", error_code=INVALID_PARAMETER_VALUE)
            result = method(*args, **kwargs)
            if name == "create_run" and self.lost_replies:
                self.lost_replies -= 1
                raise TimeoutError("Read timed out")
            return result

        return call


def trial(index: int, status: str = "FINISHED") -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{index}",
        config={"hidden_units": 32 * (index + 1)},
        repeat=0,
        status=status,
        metrics={"test_accuracy": 0.9, "trial_wall_s": 1.0},
        tags={"device.actual": "cpu:0"},
        started_at=1_700_000_000.0 + index,
        ended_at=1_700_000_001.0 + index,
        epoch_times=(0.2, 0.1),
    )


SUMMARY = SearchSummary(
    trials_total=3,
    trials_finished=3,
    trials_failed=0,
    concurrency=1,
    makespan_s=4.0,
    ray_start_s=1.0,
    time_to_first_trial_s=2.0,
    trial_wall_sum_s=3.0,
    best_metric=0.9,
)


def journaled(store_uri: str, tmp_path, grace_s: float = 1.0) -> tuple[JournaledRecorder, Outage]:
    store = MlflowRecorder(store_uri, "digits")
    outage = Outage(store.client)
    store.client = outage
    return JournaledRecorder(store, Journal.create(tmp_path / "journal", "digits"), grace_s=grace_s), outage


def start(recorder: JournaledRecorder) -> str:
    return recorder.start("digits cpu", {"epochs": 1, "grid.hidden_units": [32, 64, 96]}, {"device": "cpu"},
                          {"spec.json": {"name": "digits"}})  # fmt: skip


def children(store_uri: str, parent_run_id: str):
    from mlflow import MlflowClient

    client = MlflowClient(store_uri)
    parent = client.get_run(parent_run_id)
    runs = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'"
    )
    return client, parent, runs


def test_a_trial_is_on_disk_before_the_store_and_the_caller_never_waits_for_the_store(store, tmp_path):
    recorder, outage = journaled(store, tmp_path)
    parent = start(recorder)
    outage.down = True
    outage.threads.clear()
    appended = []  # what each journal line's write took, as the journal measured it
    append = recorder.journal.append
    recorder.journal.append = lambda *args, **kwargs: appended.append(append(*args, **kwargs)) or appended[-1]
    for index in range(3):
        recorder.record_trial(trial(index), {"epochs": 1}, {"device": "cpu"})
    trial_writes = list(appended)
    assert len(trial_writes) == 3  # three journal lines, on disk when record_trial returned
    lines = [json.loads(line) for line in recorder.journal.path.read_text().splitlines()]
    assert [line["event"] for line in lines] == ["start", "parent", "trial", "trial", "trial"]
    assert lines[1]["run_id"] == parent
    assert lines[2]["record"]["trial_id"] == "t0" and lines[2]["record"]["epoch_times"] == [0.2, 0.1]
    deadline = time.monotonic() + 30  # the writer meets the outage at least once (on a busy machine it may be late)
    while not outage.refused and time.monotonic() < deadline:
        time.sleep(0.01)
    outage.down = False  # the store comes back while the search runs: the writer catches up by itself
    recorder.finish(SUMMARY, SearchStatus.FINISHED)
    assert recorder.unsynced_hint() is None
    client, parent_run, runs = children(store, parent)
    assert sorted(r.data.tags["trial_id"] for r in runs) == ["t0", "t1", "t2"]
    assert all(r.info.status == "FINISHED" for r in runs)
    assert parent_run.info.status == "FINISHED"
    metrics = parent_run.data.metrics
    assert metrics["makespan_s"] == 4.0 and metrics["store_retries"] >= 1 and metrics["store_lag_max_s"] > 0
    # The caller's thread never called the store: every store call was the writer's.
    assert outage.threads == {"gridbench-store-writer"}, outage.threads
    # journal_write_s holds the trials' journal writes and nothing else (not the store's outage).
    assert metrics["journal_write_s"] == pytest.approx(sum(trial_writes)) and metrics["journal_write_s"] > 0
    assert parent_run.data.tags["gridbench.journal.path"] == str(recorder.journal.path)


def test_a_write_that_reached_the_store_but_failed_is_not_duplicated(store, tmp_path):
    recorder, outage = journaled(store, tmp_path)
    parent = start(recorder)
    outage.lost_replies = 1  # the first child is created, its reply lost: the retry must find it
    for index in range(2):
        recorder.record_trial(trial(index), {}, {})
    recorder.finish(SUMMARY, SearchStatus.FINISHED)
    _, _, runs = children(store, parent)
    assert sorted(r.data.tags["trial_id"] for r in runs) == ["t0", "t1"]
    assert all(r.info.status == "FINISHED" and r.data.metrics["test_accuracy"] == 0.9 for r in runs)


def test_a_store_down_for_good_leaves_one_line_and_sync_writes_the_rest_exactly_once(
    store, tmp_path, capsys, monkeypatch
):
    recorder, outage = journaled(store, tmp_path, grace_s=0.5)
    clock = VirtualClock()
    monkeypatch.setattr(journaled_module, "time", clock)  # the writer's backoffs and grace, counted, not waited
    parent = start(recorder)
    recorder.record_trial(trial(0), {"epochs": 1}, {"device": "cpu"})
    deadline = time.monotonic() + 30
    while not [r for r in children(store, parent)[2] if r.info.status == "FINISHED"] and time.monotonic() < deadline:
        time.sleep(0.1)
    outage.down = True
    for index in (1, 2):
        recorder.record_trial(trial(index, "FAILED" if index == 2 else "FINISHED"), {"epochs": 1}, {"device": "cpu"})
    before_end = clock.slept
    recorder.finish(SUMMARY, SearchStatus.FINISHED)
    # Once the search ended, the writer gave up after the grace (and the one backoff it was in), not minutes later.
    assert clock.slept - before_end <= recorder.grace_s + backoff_s(99), clock.slept - before_end
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    path = recorder.journal.path
    assert err[0].startswith(f"gridbench: the store {store} did not take every record (ConnectionError")
    assert "2 trial(s) and the search's totals are only in the journal" in err[0], err[0]
    assert err[0].endswith(f"write them with: gridbench sync {path} --tracking-uri {store}")
    journal = read_journal(path)
    assert [t.record.trial_id for t in journal.trials] == ["t0", "t1", "t2"]
    assert journal.finish["status"] == "FINISHED" and journal.finish["summary"]["makespan_s"] == 4.0

    assert main(["sync", str(path)]) == 0
    first = capsys.readouterr().out
    assert "2 trial(s) written, 1 already there" in first and "the search's totals written" in first
    assert main(["sync", str(path)]) == 0  # idempotent
    assert "0 trial(s) written, 3 already there" in capsys.readouterr().out
    client, parent_run, runs = children(store, parent)
    assert sorted((r.data.tags["trial_id"], r.info.status) for r in runs) == [
        ("t0", "FINISHED"), ("t1", "FINISHED"), ("t2", "FAILED")]  # fmt: skip
    assert parent_run.info.status == "FINISHED"
    assert len(client.get_metric_history(parent, "makespan_s")) == 1
    assert parent_run.data.metrics["store_retries"] >= 1
    assert [m.value for m in client.get_metric_history(runs[0].info.run_id, "epoch_s")] == [0.2, 0.1]


def test_a_record_the_store_refuses_is_left_to_the_journal_and_later_ones_go_in(store, tmp_path, capsys, monkeypatch):
    recorder, outage = journaled(store, tmp_path)
    clock = VirtualClock()
    monkeypatch.setattr(journaled_module, "time", clock)
    parent = start(recorder)
    outage.refused_run_name = f"{trial(0).key} #0"
    for index in range(3):
        recorder.record_trial(trial(index), {}, {})
    recorder.finish(SUMMARY, SearchStatus.FINISHED)
    assert clock.slept == backoff_s(0) + backoff_s(1)  # three attempts, two waits between them: then the next record
    err = capsys.readouterr().err
    assert "1 trial(s) are only in the journal" in err, err
    assert recorder.store_retries == 3
    _, parent_run, runs = children(store, parent)
    assert sorted(r.data.tags["trial_id"] for r in runs) == ["t1", "t2"] and parent_run.info.status == "FINISHED"


def test_sync_into_another_store_creates_the_parent_once(store, tmp_path, capsys):
    recorder, _ = journaled(store, tmp_path)
    start(recorder)
    recorder.record_trial(trial(0), {}, {})
    recorder.finish(SUMMARY, SearchStatus.KILLED, "interrupted")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    assert "(created), 1 trial(s) written" in sync_journal(recorder.journal.path, other).line()
    report = sync_journal(recorder.journal.path, other)
    assert not report.parent_created and report.trials_written == 0 and report.finish_written is False
    client, parent_run, runs = children(other, report.parent_run_id)
    assert len(runs) == 1 and parent_run.info.status == "KILLED" and parent_run.data.tags["error"] == "interrupted"
    assert len(client.search_runs([parent_run.info.experiment_id])) == 2  # one parent, one child


def test_a_journal_cut_short_by_a_crash_still_syncs(store, tmp_path):
    recorder, _ = journaled(store, tmp_path)
    parent = start(recorder)
    recorder.record_trial(trial(0), {}, {})
    recorder.journal.close()
    with open(recorder.journal.path, "a") as file:
        file.write('{"v": 1, "event": "trial", "rec')  # the driver killed mid-line
    report = sync_journal(recorder.journal.path)
    assert report.torn_lines == 1 and report.finish_written is None and report.parent_run_id == parent
    assert "the journal has no end" in report.line()


def test_what_is_not_a_journal_is_refused_in_one_line(tmp_path, capsys):
    not_journal = tmp_path / "x.jsonl"
    not_journal.write_text('{"hello": 1}\n')
    assert main(["sync", str(not_journal)]) == 2
    assert capsys.readouterr().err == f"gridbench: error: {not_journal} is not a gridbench journal " \
        "(it must begin with a search's start); check the path\n"  # fmt: skip
    assert main(["sync", str(tmp_path / "missing.jsonl")]) == 2
    with pytest.raises(UserError, match="cannot read it"):
        read_journal(tmp_path / "missing.jsonl")


def test_the_journal_lives_beside_a_local_store_and_in_the_state_directory_otherwise(tmp_path, monkeypatch):
    from gridbench.tracking.journal import JOURNAL_DIR_ENV, journal_dir

    monkeypatch.delenv(JOURNAL_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert journal_dir(f"sqlite:///{tmp_path}/a/mlflow.db") == tmp_path / "a" / "gridbench-journal"
    assert journal_dir("http://127.0.0.1:5000") == tmp_path / "state" / "gridbench" / "journal"
    monkeypatch.setenv(JOURNAL_DIR_ENV, str(tmp_path / "mine"))
    assert journal_dir("http://127.0.0.1:5000") == tmp_path / "mine"


def test_store_metrics_are_declared_in_the_schema():
    for name in ("journal_write_s", "store_write_s", "store_lag_max_s", "store_retries"):
        assert schema.declared(schema.Kind.METRIC, name).on == (schema.On.SEARCH,)
