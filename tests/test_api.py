"""The Python API's contract with its caller: a stopped search raises a UserError (never a KeyboardInterrupt), and
the caller's environment variables and signal handlers are as they were once a search returns or raises.

The search itself is a stand-in here (planning and running are the command line's, tested with real Ray
elsewhere; test_search's MNIST search checks the same restoring around a real one).
"""

from __future__ import annotations

import os
import signal

import pytest

import gridbench
from gridbench import cli, gridsearch
from gridbench.disk_space import OutOfSpace
from gridbench.gridsearch.lifecycle import EXIT_OUT_OF_SPACE, SearchInterrupted, SearchOutOfSpace


class Planned:
    """What the stand-in planner returns: enough of a plan for search() to hand to run_search."""

    def __init__(self, spec, options, *_):  # the planner's callbacks (Ray's start beside the user check): unused
        self.spec, self.options = spec, options


def what_a_search_changes(plan, observer=None):
    """Changes the process as a real search does: Tune's and MLflow's variables, its own stop handlers."""
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "10"
    del os.environ["GRIDBENCH_TEST_GONE"]
    signal.signal(signal.SIGINT, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: None)


@pytest.fixture
def stand_in(monkeypatch):
    """search() with a stand-in planner; the test sets run_search. The caller's own settings, to be kept."""
    monkeypatch.setattr(gridsearch, "plan_search", Planned)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")  # the caller's own: a search must give it back
    monkeypatch.setenv("GRIDBENCH_TEST_GONE", "kept")
    monkeypatch.delenv("TUNE_DISABLE_SIGINT_HANDLER", raising=False)

    def caller(*_):
        pass

    pytests = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    for signum in pytests:
        signal.signal(signum, caller)  # the caller's own handlers: a search must give them back
    yield
    for signum, handler in pytests.items():
        signal.signal(signum, handler)


def process_state() -> tuple[dict[str, str], dict[int, object]]:
    return dict(os.environ), {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}


def test_a_search_gives_back_the_callers_environment_and_signal_handlers(stand_in, monkeypatch):
    def runs(plan, observer=None, **_):
        what_a_search_changes(plan)
        return object()

    monkeypatch.setattr(gridsearch, "run_search", runs)
    before = process_state()
    gridbench.search("digits")
    assert process_state() == before
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "30" and os.environ["GRIDBENCH_TEST_GONE"] == "kept"
    assert "TUNE_DISABLE_SIGINT_HANDLER" not in os.environ


@pytest.mark.parametrize(
    "stop, error, exit_code, ended_by",
    [
        (SearchInterrupted(signal.SIGTERM), gridbench.SearchStoppedError, 143, "SIGTERM"),
        (SearchInterrupted(signal.SIGINT), gridbench.SearchStoppedError, 130, "SIGINT"),
        (SearchOutOfSpace(OutOfSpace("/full", 4096, "a journal")), gridbench.SearchOutOfSpaceError, 3, "out of space"),
    ],
)
def test_a_stopped_search_raises_a_user_error_and_gives_back_the_process(
    stand_in, monkeypatch, stop, error, exit_code, ended_by
):
    stop.hint = "search abc KILLED with 1 of 4 trials finished; continue it with `gridbench search digits --resume abc`"

    def stopped(plan, observer=None, **_):
        what_a_search_changes(plan)
        raise stop

    monkeypatch.setattr(gridsearch, "run_search", stopped)
    before = process_state()
    with pytest.raises(error) as raised:
        gridbench.search("digits")
    assert isinstance(raised.value, gridbench.UserError) and not isinstance(raised.value, KeyboardInterrupt)
    assert (raised.value.exit_code, raised.value.ended_by) == (exit_code, ended_by)
    assert str(raised.value).startswith("search stopped") and str(raised.value).endswith("--resume abc`")
    assert process_state() == before


def test_the_command_line_still_exits_3_for_a_disk_that_filled(monkeypatch, capsys):
    def full(args):
        stop = SearchOutOfSpace(OutOfSpace("/full", None, "the store"))
        stop.hint = "free some space"
        raise stop

    monkeypatch.setattr(cli, "_search", full)
    assert cli.main(["search", "digits"]) == EXIT_OUT_OF_SPACE == 3
    assert capsys.readouterr().err.startswith("gridbench: stopped: no space left for the store at /full")


def test_compare_gives_back_the_callers_environment(monkeypatch):
    from gridbench.comparison import recorded
    from gridbench.tracking import store

    def compared(*args, **kwargs):
        os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"  # as opening the store does
        return object()

    monkeypatch.setattr(store, "check_store_exists", lambda uri: None)
    monkeypatch.setattr(recorded, "compare_runs", compared)
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    before = dict(os.environ)
    gridbench.compare("run-a", "run-b", tracking_uri="sqlite:////nowhere/mlflow.db", record=False)
    assert dict(os.environ) == before
