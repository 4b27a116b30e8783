"""A damaged journal never stops `sync`, `report` or `ui` (issue 42): each bad line skipped, counted and named.

Each search here wrote its records to its journal only (the store down for good, its driver gone), as a store
outage leaves them; then one line of the journal is damaged, and `report`, the UI's store reading and `sync`
run against a real SQLite store.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from stores import new_store

from gridbench.cli import main
from gridbench.gridsearch import SearchOptions, plan_search
from gridbench.gridsearch.recording import search_params, spec_tags
from gridbench.gridsearch.resume import expected_tags, locate
from gridbench.spec import load_spec
from gridbench.tracking import schema, ui
from gridbench.tracking.journal import Journal, read_journal
from gridbench.tracking.journaled import JournaledRecorder
from gridbench.tracking.records import SearchSummary, TrialRecord
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.stale import waiting_searches
from gridbench.tracking.store import MlflowRecorder

UNITS = (16, 32, 48)
# Each kind of damage, as the bytes of a whole line (its newline added).
DAMAGES = {
    "a bare number": (b"42", "not a journal event"),
    "a trial without record": (b'{"v": 1, "event": "trial", "params": {}, "tags": {}}', "without its record"),
    "an empty record": (b'{"v": 1, "event": "trial", "record": {}, "params": {}}', "without its record"),
    "not UTF-8": (b'{"v": 1, "event": "trial", "x": "\xff\xfe"}', "not UTF-8"),
    "garbage": (b"%%% not json at all", "not JSON"),
    "NUL bytes": (b"\0\0\0\0", "not JSON"),
    "cut short": (b'{"v": 1, "event": "trial", "rec', "not JSON"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    return new_store(tmp_path_factory.mktemp("store"))


class StoreDown:
    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise ConnectionError("Connection refused")

        return call


def plan_of(store: str):
    spec = load_spec("digits").with_overrides(
        {"learning_rate": "0.01", "epochs": "2"}, {"hidden_units": [str(u) for u in UNITS]}
    )
    return plan_search(spec, SearchOptions(cpus_per_trial=1, tracking_uri=store))


def trial(index: int) -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{index}", config={"hidden_units": UNITS[index]}, repeat=0, status="FINISHED",
        metrics={"test_accuracy": 0.9, "trial_wall_s": 1.0}, tags={}, started_at=1.7e9 + index,
        ended_at=1.7e9 + index + 1,
    )  # fmt: skip


def journal_only_search(plan, directory: Path, command: str = "gridbench search digits") -> tuple[str, Path]:
    """A FINISHED search whose parent reached the store RUNNING and whose trials and end are in its journal only."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    recorder = JournaledRecorder(MlflowRecorder(plan.tracking_uri, plan.spec.name), Journal.create(directory, "d"))
    recorder.grace_s = 0.2
    tags = {schema.KIND: "search", **spec_tags(plan.spec, plan.data.description, False), **expected_tags(plan),
            schema.DRIVER_HOST: socket.gethostname(), schema.DRIVER_PID: str(gone.pid),
            schema.DRIVER_STARTED: "1.000", schema.COMMAND: command}  # fmt: skip
    recorder.start("digits cpu", search_params(plan.spec), tags, {})
    recorder.store.client = StoreDown(recorder.store.client)
    for index in range(len(UNITS)):
        recorder.record_trial(trial(index), search_params(plan.spec), {schema.KIND: "trial"})
    summary = SearchSummary(
        trials_total=3, trials_finished=3, trials_failed=0, concurrency=1, makespan_s=4.0, ray_start_s=1.0,
        time_to_first_trial_s=2.0, trial_wall_sum_s=3.0, best_metric=0.9,
    )  # fmt: skip
    recorder.announce_unsynced = False
    recorder.finish(summary, SearchStatus.FINISHED)
    return recorder.parent_run_id, recorder.journal.path


def damage(journal: Path, line: bytes, replace_trial: int | None = None) -> int:
    """Adds the damaged line after the first trial's (or puts it in trial `replace_trial`'s place); its number."""
    lines = journal.read_bytes().split(b"\n")[:-1]
    first_trial = next(i for i, text in enumerate(lines) if b'"event": "trial"' in text)
    if replace_trial is None:
        lines.insert(first_trial + 1, line)
        at = first_trial + 1
    else:
        at = first_trial + replace_trial
        lines[at] = line
    journal.write_bytes(b"\n".join(lines) + b"\n")
    return at + 1


def children(store: str, run_id: str):
    from mlflow import MlflowClient

    client = MlflowClient(store)
    parent = client.get_run(run_id)
    query = f"tags.`{schema.PARENT_RUN}` = '{run_id}'"
    return parent, client.search_runs([parent.info.experiment_id], filter_string=query)


@pytest.mark.parametrize("kind", list(DAMAGES))
def test_a_damaged_line_is_skipped_and_named_by_report_ui_and_sync(kind, store, tmp_path, capsys):
    line, why = DAMAGES[kind]
    plan = plan_of(store)
    run_id, journal = journal_only_search(plan, tmp_path / "journal")
    number = damage(journal, line)
    capsys.readouterr()

    contents = read_journal(journal)
    assert [(b.number, why in b.why) for b in contents.bad_lines] == [(number, True)]
    assert len(contents.trials) == 3 and contents.finish["status"] == "FINISHED"

    # report: the search is named with its sync command, the page written; nothing raised for the whole store
    assert main(["report", run_id, "--tracking-uri", store, "--html", str(tmp_path / "r.html")]) == 0
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"gridbench sync {journal}" in err
    # the UI's reading of the store: every experiment's searches, stale or waiting
    experiment = children(store, run_id)[0].info.experiment_id
    assert (run_id, journal) in waiting_searches(__import__("mlflow").MlflowClient(store), [experiment])
    assert ui.pages("http://127.0.0.1:5000", store, "digits").runs.startswith("http://127.0.0.1:5000/#/experiments/")

    assert main(["sync", str(journal)]) == 0
    out, err = capsys.readouterr()
    assert "3 trial(s) written" in out and f"1 unreadable line(s) skipped (line {number}: " in out and why in out
    assert err == ""
    assert main(["sync", str(journal)]) == 0 and "0 trial(s) written, 3 already there" in capsys.readouterr().out
    parent, runs = children(store, run_id)
    assert sorted(r.data.params["hidden_units"] for r in runs) == ["16", "32", "48"]  # each once
    assert parent.info.status == "FINISHED"


def test_a_finished_trial_whose_line_is_lost_runs_again_on_resume_and_its_parent_is_not_finished(store, tmp_path):
    plan = plan_of(store)
    run_id, journal = journal_only_search(plan, tmp_path / "journal")
    number = damage(journal, b"42", replace_trial=1)  # trial t1 (hidden_units=32) is gone

    report_line = __import__("gridbench.tracking.sync", fromlist=["sync_journal"]).sync_journal(journal).line()
    assert f"line {number}: not a journal event" in report_line and "2 trial(s) written" in report_line
    assert "marked KILLED" in report_line and f"--resume {run_id}" in report_line
    parent, runs = children(store, run_id)
    assert parent.info.status == "KILLED" and f"--resume {run_id}" in parent.data.tags[schema.ERROR]
    assert sorted(r.data.params["hidden_units"] for r in runs) == ["16", "48"]
    point = locate(plan, run_id)
    assert point.tune_points(plan) == [{"hidden_units": 32, "repeat": 0}]  # the lost one runs again


# --- the commands printed for pasting, pasted -----------------------------------------------------------------------


def paste(command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """Runs a printed command as a user pasting it would: through a shell, with gridbench on the PATH."""
    env = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])}
    return subprocess.run(["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def between(text: str, before: str, after: str) -> str:
    start = text.index(before) + len(before)
    return text[start : text.index(after, start)]


@pytest.mark.slow
def test_every_printed_command_pasted_as_printed_runs_on_a_store_path_with_spaces_and_accents(tmp_path):
    """report names `sync`, sync names `--resume`, a search's summary names `ui`: each pasted. The `--resume` one
    is run in tests/test_trial_faults.py (after a node's death, on such a path), which trains."""
    from gridbench.tracking import ui_command

    directory = tmp_path / "my störe 'ü' dir"
    store = new_store(directory)
    plan = plan_of(store)
    command = "gridbench search digits --set learning_rate=0.01 --set epochs=2 --grid hidden_units=16,32,48 "
    command += f"--cpus-per-trial 1 --tracking-uri {shlex.quote(store)}"
    run_id, journal = journal_only_search(plan, directory / "gridbench-journal", command)
    damage(journal, b"42", replace_trial=1)

    reported = paste(f"gridbench report {run_id} --tracking-uri {shlex.quote(store)}", tmp_path)
    assert reported.returncode == 0, reported.stderr
    synced = paste(between(reported.stderr, "write them with: ", " (then, if trials are left"), tmp_path)
    assert synced.returncode == 0 and "2 trial(s) written" in synced.stdout, synced.stdout + synced.stderr
    resume = between(synced.stdout, "run it again with `", "`")
    # The run id alone (its parent run holds the spec and options), and the store, its path one word.
    assert shlex.split(resume) == ["gridbench", "search", "--resume", run_id, "--tracking-uri", store]
    assert locate(plan, run_id).tune_points(plan) == [{"hidden_units": 32, "repeat": 0}]

    port = ui.free_port()
    # As from a terminal: Ctrl-C's default disposition, whatever this test process inherited (a process that
    # starts with SIGINT ignored keeps it ignored, and so do its children: in CI's pytest worker, the ui never stopped).
    server = subprocess.Popen(["bash", "-c", f"exec {ui_command(store)} --port {port}"], cwd=tmp_path,
                              stdout=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # fmt: skip
    try:
        lines = iter(server.stdout.readline, "")  # the MLflow server's own lines come first
        assert next(line for line in lines if line.startswith("MLflow UI for ")).startswith(
            f"MLflow UI for {store}: http://127.0.0.1:{port}/"
        )
    finally:
        os.killpg(server.pid, signal.SIGINT)
        server.wait(timeout=60)


def test_the_printed_commands_quote_every_word_for_the_shell():
    from gridbench.tracking.commands import resume_command, sync_command, ui_command

    store = "sqlite:////tmp/my störe 'x'/mlflow.db"
    # The run id alone: its parent run holds the spec and the options (gridbench.resume_arguments).
    pasted = ["gridbench", "search", "--resume", "r1", "--tracking-uri", store]
    assert shlex.split(resume_command("r1", store)) == pasted
    assert resume_command("r2") == "gridbench search --resume r2"
    assert shlex.split(sync_command("/a b/j.jsonl", store)) == [
        "gridbench",
        "sync",
        "/a b/j.jsonl",
        "--tracking-uri",
        store,
    ]
    assert shlex.split(ui_command(store))[-1] == store
