"""Full disks, read-only stores, and a journal not yet synced (issue 31).

A full disk is a real one where this process may mount a small tmpfs (root, as in CI's
container); elsewhere ENOSPC is injected at the journal's and the writer's seams. A
read-only store is read by a process whose uid is `nobody` and whose capabilities are
dropped (root ignores file modes). The store is a real SQLite MLflow store throughout.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from clocks import VirtualClock

from gridbench.cli import main
from gridbench.disk_space import OutOfSpace
from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, plan_search
from gridbench.gridsearch.lifecycle import EXIT_OUT_OF_SPACE, SearchOutOfSpace
from gridbench.gridsearch.recording import search_params, spec_tags
from gridbench.gridsearch.resume import expected_tags, locate
from gridbench.spec import load_spec
from gridbench.tracking import journaled as journaled_module
from gridbench.tracking import schema
from gridbench.tracking.journal import Journal, check_journal_dir, read_journal
from gridbench.tracking.journaled import JournaledRecorder, shorten
from gridbench.tracking.records import SearchSummary, TrialRecord, config_key
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.store import MlflowRecorder, check_tracking_uri
from gridbench.tracking.sync import sync_journal


class SmallFs:
    """A tmpfs of a few MB, mounted for one test; `fill` takes all its space, `free` gives it back."""

    def __init__(self, path: Path):
        self.path = path
        self.filler = path / "filler"

    def fill(self) -> None:
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink()


@pytest.fixture
def small_fs():
    path = Path(tempfile.mkdtemp(prefix="gbfs-", dir="/tmp"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(path)], capture_output=True)
    if mounted.returncode != 0:
        path.rmdir()
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}); the injected tests cover it")
    path.chmod(0o755)
    yield SmallFs(path)
    subprocess.run(["umount", "-l", str(path)], check=False)
    path.rmdir()


def trial(index: int, trial_id: str | None = None, started: float = 1_700_000_000.0) -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id or f"t{index}",
        config={"hidden_units": 16 * (index + 1)},
        repeat=0,
        status="FINISHED",
        metrics={"test_accuracy": 0.9, "trial_wall_s": 1.0},
        tags={},
        started_at=started + index,
        ended_at=started + index + 1,
    )


SUMMARY = SearchSummary(
    trials_total=3, trials_finished=3, trials_failed=0, concurrency=1, makespan_s=4.0, ray_start_s=1.0,
    time_to_first_trial_s=2.0, trial_wall_sum_s=3.0, best_metric=0.9,
)  # fmt: skip


def digits_plan(store: str, units=(16, 32, 48)):
    spec = load_spec("digits").with_overrides(
        {"learning_rate": "0.01", "epochs": "2"}, {"hidden_units": [str(u) for u in units]}
    )
    return plan_search(spec, SearchOptions(cpus_per_trial=1, tracking_uri=store))


def start_search(plan, journal_dir: Path, driver_pid: int | None = None) -> JournaledRecorder:
    """A search's parent as run_search writes it (without Ray), behind a journal; its driver `driver_pid`."""
    journal = Journal.create(journal_dir, "digits")
    recorder = JournaledRecorder(MlflowRecorder(plan.tracking_uri, plan.spec.name), journal)
    tags = {schema.KIND: "search", **spec_tags(plan.spec, plan.data.description, False), **expected_tags(plan)}
    if driver_pid is not None:
        tags |= {schema.DRIVER_HOST: socket.gethostname(), schema.DRIVER_PID: str(driver_pid),
                 schema.DRIVER_STARTED: "1.000"}  # fmt: skip
    recorder.start("digits cpu", search_params(plan.spec), tags, {})
    return recorder


def dead_pid() -> int:
    gone = subprocess.Popen(["true"])
    gone.wait()
    return gone.pid


def children(store: str, parent_run_id: str):
    from mlflow import MlflowClient

    client = MlflowClient(store)
    parent = client.get_run(parent_run_id)
    query = f"tags.`{schema.PARENT_RUN}` = '{parent_run_id}'"
    return parent, client.search_runs([parent.info.experiment_id], filter_string=query)


class StoreDown:
    """Wraps an MlflowClient: every call raises as a server that is gone."""

    def __init__(self, client, error: Exception):
        self.client, self.error = client, error

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise self.error

        return call


# --- a journal line is whole or absent ----------------------------------------------------------------------------


def test_a_line_cut_short_by_enospc_is_taken_back_and_the_journal_says_where_and_how_much(tmp_path, monkeypatch):
    journal = Journal.create(tmp_path, "digits")
    journal.append("start", journal_id="x", tracking_uri="sqlite:///x", experiment_name="e", run_name="r",
                   params={}, tags={}, documents={})  # fmt: skip
    real_write = os.write

    def half_then_full(fd, data):  # the disk takes half the line, then has no more room
        if len(data) > 64:
            return real_write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OutOfSpace) as full:
        journal.append("note", padding="x" * 500)
    monkeypatch.setattr(os, "write", real_write)
    assert str(journal.path) in str(full.value) and "needed" in str(full.value) and "free" in str(full.value)
    text = journal.path.read_text()
    assert text.endswith("\n") and [json.loads(line)["event"] for line in text.splitlines()] == ["start"]
    journal.append("note", n=1)  # space again: the next line goes in whole
    assert read_journal(journal.path).torn_lines == 0


def test_on_a_real_full_disk_every_journal_line_is_whole(small_fs):
    journal = Journal.create(small_fs.path / "journal", "digits")
    journal.append("start", journal_id="x", tracking_uri="sqlite:///x", experiment_name="e", run_name="r",
                   params={}, tags={}, documents={})  # fmt: skip
    small_fs.fill()
    written = 0
    with pytest.raises(OutOfSpace):
        for _ in range(10_000):
            journal.append("note", padding="y" * 3000)
            written += 1
    journal.close()
    lines = journal.path.read_text().splitlines()
    assert len(lines) == written + 1 and all(json.loads(line) for line in lines)  # no torn line
    assert read_journal(journal.path).torn_lines == 0


# --- no space before a search starts: one line, exit 2, nothing left behind -------------------------------------


def test_a_full_disk_is_refused_before_anything_is_written(small_fs, capsys, monkeypatch):
    monkeypatch.delenv("GRIDBENCH_JOURNAL_DIR", raising=False)
    store = f"sqlite:///{small_fs.path / 'new' / 'mlflow.db'}"
    (small_fs.path / "new").mkdir()
    small_fs.fill()
    empty = tempfile.TemporaryFile(dir=small_fs.path)  # an empty file is still created on a full disk
    empty.close()
    with pytest.raises(UserError, match=r"^no space for the MLflow store in .*new \(\d+ bytes free; a search needs"):
        check_tracking_uri(store)
    with pytest.raises(UserError, match="no space for the search's journal"):
        check_journal_dir(store)

    code = main(["search", "digits", "--tracking-uri", store, "--set", "epochs=2", "--grid", "hidden_units=16"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("gridbench: error: no space for the MLflow store")
    assert "Traceback" not in err
    assert sorted(p.name for p in small_fs.path.rglob("*")) == ["filler", "new"]  # no db, lock, nor journal dir
    small_fs.free()
    check_tracking_uri(store)  # with room, the same store is fine


# --- the disk fills mid-search ----------------------------------------------------------------------------------


def test_a_full_store_stops_the_writer_at_once_and_the_journal_keeps_the_rest(small_fs, tmp_path, capsys, monkeypatch):
    plan = digits_plan(f"sqlite:///{small_fs.path / 'mlflow.db'}")
    recorder = start_search(plan, tmp_path / "journal")  # the journal on a disk with room
    recorder.grace_s = 30  # a full store must not be waited for
    clock = VirtualClock()
    monkeypatch.setattr(journaled_module, "time", clock)  # the writer's waits, counted rather than waited
    small_fs.fill()
    for index in range(3):
        recorder.record_trial(trial(index), {}, {schema.KIND: "trial"})
    deadline = time.monotonic() + 30
    while recorder.fault is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert isinstance(recorder.fault, OutOfSpace) and str(small_fs.path / "mlflow.db") in str(recorder.fault)
    recorder.announce_unsynced = False
    recorder.finish(SUMMARY, SearchStatus.KILLED, "stopped: out of space")
    assert clock.slept == 0 and recorder.store_retries == 1  # no retry storm, no wait for the grace
    assert recorder.unwritten == 3 and recorder.finish_unwritten  # what the store lacks is counted, left to sync
    assert capsys.readouterr().err == ""  # no traceback, no MLflow log: the search's stop says it in one line
    assert len(read_journal(recorder.journal.path).trials) == 3

    small_fs.free()
    report = sync_journal(recorder.journal.path)
    assert report.trials_written == 3 and report.finish_written
    parent, runs = children(plan.tracking_uri, recorder.parent_run_id)
    assert sorted(r.data.params["hidden_units"] for r in runs) == ["16", "32", "48"]


def test_a_full_journal_stops_the_search_after_the_trial_is_recorded(tmp_path, monkeypatch):
    from gridbench.gridsearch.tune_callback import RecordingCallback

    plan = digits_plan(f"sqlite:///{tmp_path / 'mlflow.db'}")
    recorder = start_search(plan, tmp_path / "journal")

    def full(*args, **kwargs):
        raise OutOfSpace(tmp_path / "journal", 2048, "the search's journal")

    monkeypatch.setattr(recorder.journal, "append", full)
    callback = RecordingCallback(recorder, {}, {schema.KIND: "trial"}, None)

    class Trial:
        trial_id, config = "abc", {"hidden_units": 16, "repeat": 0}

    callback.on_trial_start(0, [], Trial)
    with pytest.raises(SearchOutOfSpace) as stop:
        callback.on_trial_complete(0, [], Trial)  # a lost outcome: FAILED, recorded, then the stop
    assert stop.value.exit_code == EXIT_OUT_OF_SPACE == 3 and "the search's journal" in stop.value.report()
    assert len(callback.records) == 1
    callback.on_step_end(1, [])  # raised once only: the search is ending
    recorder.finish(None, SearchStatus.KILLED, "stopped")
    _, runs = children(plan.tracking_uri, recorder.parent_run_id)
    assert len(runs) == 1  # the store had room: the trial is there


# --- a journal not yet synced ------------------------------------------------------------------------------------


def test_a_search_whose_records_wait_in_its_journal_is_never_taken_for_dead(tmp_path, capsys, monkeypatch):
    """The issue's sequence: store down for good, the driver exits, `report`, a resumed session, `sync`."""
    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    plan = digits_plan(store)
    recorder = start_search(plan, tmp_path / "journal", driver_pid=dead_pid())
    recorder.grace_s = 0.5
    recorder.store.client = StoreDown(recorder.store.client, ConnectionError("Connection refused"))
    records = [trial(i) for i in range(3)]
    for record in records:
        recorder.record_trial(record, search_params(plan.spec), {schema.KIND: "trial"})
    recorder.finish(SUMMARY, SearchStatus.FINISHED)
    journal = recorder.journal.path
    run_id = recorder.parent_run_id
    capsys.readouterr()

    assert main(["report", run_id, "--html", str(tmp_path / "r.html")]) == 0  # the store is back
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"write them with: gridbench sync {journal}" in err and "--resume" in err
    parent, runs = children(store, run_id)
    assert parent.info.status == "RUNNING" and schema.ERROR not in parent.data.tags and runs == []

    # A session that trained them again (an older gridbench's --resume): sync must not write them twice.
    again = MlflowRecorder(store, "digits")
    again.experiment_id, again.parent_run_id = parent.info.experiment_id, run_id
    for index in range(2):
        again.record_trial(trial(index, trial_id=f"new{index}", started=1_800_000_000.0), {"hidden_units": 0}, {})
    report = sync_journal(journal)
    assert report.trials_written == 1 and report.superseded == 2 and "2 left out" in report.line()
    parent, runs = children(store, run_id)
    finished = sorted(r.data.tags[schema.CONFIG_KEY] for r in runs if r.info.status == "FINISHED")
    assert finished == sorted(config_key(r.config) for r in records)  # each configuration FINISHED once
    assert parent.info.status == "FINISHED"


def test_resume_syncs_a_waiting_journal_first_and_trains_nothing_it_holds(tmp_path, capsys):
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    plan = digits_plan(store)
    recorder = start_search(plan, tmp_path / "journal", driver_pid=dead_pid())
    recorder.grace_s = 0.5
    first = recorder.store.client
    recorder.record_trial(trial(0), search_params(plan.spec), {schema.KIND: "trial"})
    deadline = time.monotonic() + 30
    while not children(store, recorder.parent_run_id)[1] and time.monotonic() < deadline:
        time.sleep(0.05)
    recorder.store.client = StoreDown(first, ConnectionError("Connection refused"))
    recorder.record_trial(trial(1), search_params(plan.spec), {schema.KIND: "trial"})
    recorder.finish(SUMMARY, SearchStatus.KILLED, "stopped by SIGTERM")
    capsys.readouterr()

    point = locate(plan)  # without the sync, trial 1 (only in the journal) would run again
    assert point.parent_run_id == recorder.parent_run_id
    assert point.remaining == 1 and point.tune_points(plan) == [{"hidden_units": 48, "repeat": 0}]
    assert "before resuming, synced" in capsys.readouterr().err
    assert sync_journal(recorder.journal.path).trials_written == 0


def test_a_dead_drivers_search_with_everything_in_the_store_is_still_marked_killed(tmp_path):
    from gridbench.tracking import read_search

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    recorder = start_search(digits_plan(store), tmp_path / "journal", driver_pid=dead_pid())
    recorder.record_trial(trial(0), {}, {schema.KIND: "trial"})
    recorder.finish(None, SearchStatus.RUNNING)  # as if killed: no end in the store, every trial there
    lines = recorder.journal.path.read_text().splitlines()
    recorder.journal.path.write_text("\n".join(lines[:-1]) + "\n")  # a SIGKILL writes no end either
    read_search(store, recorder.parent_run_id)
    parent, _ = children(store, recorder.parent_run_id)
    assert parent.info.status == "KILLED" and "--resume" in parent.data.tags[schema.ERROR]


# --- a read-only store --------------------------------------------------------------------------------------------


def as_nobody(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """gridbench run by uid nobody with no capabilities: file modes hold, as for a user who is not the owner."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a process that file modes bind")
    command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
               "--bounding-set=-all", sys.executable, "-m", "gridbench", *args]  # fmt: skip
    env = {**os.environ, "HOME": str(cwd), "MPLCONFIGDIR": str(cwd)}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture
def read_only_store():
    """A store with two finished searches (CPU and GPU), then its file and directory made read-only."""
    root = Path(tempfile.mkdtemp(prefix="gbro-", dir="/tmp"))
    store = f"sqlite:///{root / 'store' / 'mlflow.db'}"
    (root / "store").mkdir()
    plan = digits_plan(store)
    run_ids = []
    for device in ("cpu", "gpu"):
        recorder = start_search(plan, root / "store" / "gridbench-journal")
        recorder.store.client.set_tag(recorder.parent_run_id, schema.DEVICE, device)
        for index in range(3):
            recorder.record_trial(trial(index, f"{device}{index}"), search_params(plan.spec), {schema.KIND: "trial"})
        recorder.finish(SUMMARY, SearchStatus.FINISHED)
        run_ids.append(recorder.parent_run_id)
    out = root / "out"
    out.mkdir()
    out.chmod(0o777)
    for path in (root / "store").rglob("*"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    (root / "store").chmod(0o555)
    root.chmod(0o755)
    yield store, run_ids, out
    for path in [root / "store", *(root / "store").rglob("*")]:
        path.chmod(0o755)
    shutil.rmtree(root)


def test_a_read_only_store_is_reported_and_compared_without_writing(read_only_store):
    store, (cpu, gpu), out = read_only_store
    before = {p: p.stat().st_mtime for p in Path(store[len("sqlite:///") :]).parent.rglob("*")}
    reported = as_nobody("report", cpu, "--tracking-uri", store, "--html", str(out / "r.html"), cwd=out)
    assert reported.returncode == 0, reported.stderr
    assert (out / "r.html").stat().st_size > 1000 and reported.stderr == ""

    compared = as_nobody("compare", cpu, gpu, "--tracking-uri", store, "--allow-mismatch", cwd=out)
    assert compared.returncode == 0, compared.stderr
    assert "Traceback" not in compared.stderr and compared.stderr.count("\n") == 1, compared.stderr
    assert "cannot log the comparison" in compared.stderr and "read-only" in compared.stderr
    assert cpu[:8] in compared.stdout  # the results were printed
    assert {p: p.stat().st_mtime for p in before} == before  # nothing in the store changed


def test_the_python_api_compares_through_the_command_lines_path_and_says_why_it_could_not_log(
    read_only_store, monkeypatch
):
    import gridbench
    from gridbench.tracking import store as tracking_store

    store, (cpu, gpu), _ = read_only_store
    compared = gridbench.compare(cpu, gpu, tracking_uri=store, allow_mismatch=True, record=False)
    assert compared.run_id is None and compared.to_dict()["searches"][0]["run_id"] == cpu
    # This process is root, which file modes do not bind: the store says it is read-only as it would to a user.
    monkeypatch.setattr(tracking_store, "store_writable", lambda uri: False)
    with pytest.raises(UserError, match=r"cannot log the comparison to .* \(the store is read-only here\); compare"):
        gridbench.compare(cpu, gpu, tracking_uri=store, allow_mismatch=True)


def test_a_search_into_a_read_only_store_is_still_refused_in_one_line(read_only_store):
    store, _, out = read_only_store
    refused = as_nobody("search", "digits", "--tracking-uri", store, "--grid", "hidden_units=16", cwd=out)
    assert refused.returncode == 2 and refused.stderr.startswith("gridbench: error: tracking URI"), refused.stderr


# --- small things -------------------------------------------------------------------------------------------------


def test_a_long_error_is_cut_at_a_word_and_says_so():
    text = "HTTPConnectionPool(host='127.0.0.1', port=5000): Max retries exceeded with url: /api/2.0/mlflow/runs/create"
    cut = shorten(text, 80)
    assert len(cut) <= 80 and cut.endswith("...") and not cut.endswith("(...") and "Max retries" in cut
    assert shorten("short", 80) == "short"


def test_the_progress_line_counts_a_killed_trial_as_killed_not_failed():
    from rich.console import Console

    from gridbench.gridsearch.progress import SearchProgress

    progress = SearchProgress(Console(file=open(os.devnull, "w")), "test_accuracy", "steady_epoch_s")
    progress.start(2)
    killed = TrialRecord("a", {"hidden_units": 16}, 0, "KILLED", {}, {}, 1.0, 2.0, error="stopped by SIGTERM")
    progress.trial_started({})
    progress.trial_ended(killed)
    state = progress.progress.tasks[0].fields["state"]
    progress.stop()
    assert "1 killed" in state and "failed" not in state


def test_the_summary_does_not_send_a_user_to_a_tracking_server_that_is_gone():
    from gridbench.tracking.store import ui_command
    from gridbench.tracking.ui import free_port

    gone = f"http://127.0.0.1:{free_port()}"
    assert ui_command(gone) == f"the tracking server {gone} does not answer now; open it once it is back"
    assert ui_command("sqlite:///x.db") == "python -m gridbench ui --tracking-uri sqlite:///x.db"
