"""The store opening beside Tune's start (gridbench.gridsearch.store_opening): a search's recorder until then."""

from __future__ import annotations

import threading
import time
import types
from concurrent.futures import Future

import fakes
import pytest
from stores import new_store
from test_lifecycle import digits, search_runs

from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, plan_search, run_search
from gridbench.gridsearch.store_opening import OpeningRecorder
from gridbench.gridsearch.tune_callback import RecordingCallback


class Recorder:
    """A recorder's calls, noted (a fake: the real one is the integration test's below)."""

    def __init__(self):
        self.parent_run_id = None
        self.calls: list[str] = []
        self.announce_unsynced = True

    def start(self, **run):
        self.parent_run_id = "parent"

    def record_trial(self, trial, params, tags):
        self.calls.append("trial")
        return "t1"

    def finish(self, summary, status, error=None):
        self.calls.append("finish")


def test_the_recorder_waits_for_the_store_then_the_parent_and_each_use_waits_for_both():
    opening, allowed = Future(), threading.Event()
    inner = Recorder()

    def start_parent(recorder):
        allowed.wait()
        recorder.start()

    recorder = OpeningRecorder(opening, start_parent, "sqlite://")
    assert recorder.parent_run_id is None and recorder.fault is None and recorder.opening_error is None
    opening.set_result((inner, []))
    assert recorder.parent_run_id is None  # the parent not created yet
    recorded = []
    writer = threading.Thread(target=lambda: recorded.append(recorder.record_trial(None, {}, {})))
    writer.start()
    writer.join(0.2)
    assert writer.is_alive() and inner.calls == []  # a trial that ended first waits for its parent
    allowed.set()
    writer.join(10)
    assert recorded == ["t1"] and recorder.parent_run_id == "parent" and recorder.opened_at is not None
    recorder.announce_unsynced = False  # the recorder's own settings go to it
    assert inner.announce_unsynced is False
    recorder.finish(None, "FINISHED")
    assert inner.calls == ["trial", "finish"]


def test_a_store_that_did_not_open_fails_every_use_with_its_error_and_finishing_writes_nothing():
    opening = Future()
    opening.set_exception(UserError("the store went away"))
    recorder = OpeningRecorder(opening, lambda recorder: pytest.fail("no parent without a store"), "sqlite://")
    with pytest.raises(UserError, match="went away"):
        recorder.ready()
    assert isinstance(recorder.opening_error, UserError) and recorder.parent_run_id is None
    with pytest.raises(UserError, match="went away"):
        recorder.record_trial(None, {}, {})
    recorder.finish(None, "FAILED")  # nothing to end: the store never had the search


def test_tunes_loop_stops_the_search_with_the_stores_error_once():
    opening = Future()
    opening.set_exception(UserError("the store went away"))
    recorder = OpeningRecorder(opening, lambda recorder: None, "sqlite://")
    with pytest.raises(UserError):
        recorder.ready()  # the opening's thread has ended
    callback = RecordingCallback(recorder, {}, {}, None)
    with pytest.raises(UserError, match="went away"):
        callback.on_step_end(iteration=1, trials=[])
    callback.on_step_end(iteration=2, trials=[])  # once: the search is ending
    assert RecordingCallback(types.SimpleNamespace(), {}, {}, None).on_step_end(iteration=1, trials=[]) is None


@pytest.mark.slow
def test_tune_starts_the_trials_before_the_store_is_open_and_their_records_wait_for_it(tmp_path, monkeypatch):
    """The store opens only once a trial has run: a search whose Tune waited for its store would never end."""
    from gridbench.tracking.journaled import open_journaled_recorder

    store, marker = new_store(tmp_path), tmp_path / "ran"
    monkeypatch.setenv(fakes.RAN_MARKER_ENV, str(marker))  # before Ray starts: its workers inherit it
    plan = plan_search(digits(("32", "64")), SearchOptions(cpus_per_trial=1, tracking_uri=store))

    def store_after_a_trial(tracking_uri, spec_name):
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), "no trial ran before the store opened: Tune waited for it"
        return open_journaled_recorder(tracking_uri, spec_name)

    result = run_search(plan, runner=fakes.notes_it_ran, open_recorder=store_after_a_trial)
    (parent,), children = search_runs(store)
    assert parent.info.run_id == result.parent_run_id and parent.info.status == "FINISHED"
    assert sorted(c.info.status for c in children) == ["FINISHED", "FINISHED"]  # none lost while it opened
    assert parent.data.metrics["store_open_after_launch_s"] > 0  # said, not hidden: it opened after Tune's start


@pytest.mark.slow
def test_a_store_that_fails_to_open_beside_tunes_start_fails_the_search_and_writes_nothing(tmp_path):
    """Tune starts before the store is open; where it never opens, the search stops with the store's error."""
    import ray

    store = new_store(tmp_path)
    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store))

    def failing_store(tracking_uri, spec_name):
        while not ray.is_initialized():  # Ray up: Tune starts, next, without waiting for the store
            time.sleep(0.05)
        time.sleep(1.0)
        raise UserError("the store went away")

    with pytest.raises(UserError, match="the store went away"):
        run_search(plan, runner=fakes.succeeds, open_recorder=failing_store)
    assert not ray.is_initialized()
    assert search_runs(store) == ([], [])
