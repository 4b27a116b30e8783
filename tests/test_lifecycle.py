"""Every way a search ends: signals, a driver killed outright and --resume, a worker killed mid-trial.

The end-to-end tests run `python -m gridbench search` (real Ray, real Keras on digits) or
run_search with a fake trial (tests/fakes.py) against a real SQLite store. Processes are
found through the search's own process tree and ended by PID, never by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import fakes
import psutil
import pytest
from stores import new_store

from gridbench.errors import UserError
from gridbench.gridsearch import SearchOptions, plan_search, run_search
from gridbench.gridsearch.lifecycle import SearchInterrupted, StopSignals
from gridbench.gridsearch.recording import search_params
from gridbench.gridsearch.resume import expected_tags, locate
from gridbench.gridsearch.tune_callback import death_reason
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.tracking.records import TrialRecord
from gridbench.tracking.store import MlflowRecorder


def digits(units=("32", "64"), epochs="2"):
    return load_spec("digits").with_overrides(
        {"learning_rate": "0.01", "epochs": epochs}, {"hidden_units": list(units)}
    )


def search_runs(store: str):
    from mlflow import MlflowClient

    client = MlflowClient(store)
    experiment = client.get_experiment_by_name("gridbench/digits")
    runs = client.search_runs([experiment.experiment_id], max_results=1000) if experiment else []
    parents = [r for r in runs if schema.PARENT_RUN not in r.data.tags]
    children = [r for r in runs if schema.PARENT_RUN in r.data.tags]
    return parents, children


# --- fast: no Ray ------------------------------------------------------------------------------------------------


def test_sigterm_raises_search_interrupted_once_and_a_swallowed_signal_is_still_seen():
    signals = StopSignals()
    signals.install()
    try:
        with pytest.raises(SearchInterrupted) as raised:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert raised.value.exit_code == 143 and raised.value.signal_name == "SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # a second signal while the search ends is noted, not raised
        time.sleep(0.1)
        with pytest.raises(SearchInterrupted):
            signals.check()  # as after a ray.init that swallowed the first
    finally:
        signals.restore()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_dead_workers_reason_is_rays_first_line_and_exit_detail():
    class ActorDiedError(Exception):
        pass

    error = ActorDiedError(
        "The actor died unexpectedly before finishing this task.\n\tclass_name: ImplicitFunc\n\tpid: 4242\n"
        "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
        "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes include: (1) ..."
    )
    assert death_reason(error) == (
        "ActorDiedError: The actor died unexpectedly before finishing this task. (Worker exit type: SYSTEM_ERROR "
        "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file.)"
    )


def _recorded_search(plan, tags=None, finished=()):
    """A search's parent (and FINISHED children) written as run_search writes them, without Ray."""
    recorder = MlflowRecorder(plan.tracking_uri, plan.spec.name)
    recorder.start("test", search_params(plan.spec), {schema.KIND: "search", **expected_tags(plan), **(tags or {})}, {})
    for config, repeat in finished:
        record = TrialRecord("t", config, repeat, "FINISHED", {"test_accuracy": 0.5}, {}, time.time(), time.time())
        recorder.record_trial(record, {}, {schema.KIND: "trial"})
    return recorder


def test_resume_refuses_other_options_in_one_line_and_runs_only_what_did_not_finish(store):
    plan = plan_search(digits(("16", "32", "64")), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    recorder = _recorded_search(plan, finished=[({"hidden_units": 32}, 0)])
    recorder.finish(None, schema.SearchStatus.KILLED, "stopped by SIGTERM")

    point = locate(plan)  # the latest unfinished search of digits
    assert point.parent_run_id == recorder.parent_run_id and point.remaining == 2
    assert point.tune_points(plan) == [{"hidden_units": 16, "repeat": 0}, {"hidden_units": 64, "repeat": 0}]

    other = plan_search(digits(("16", "32", "64"), epochs="3"), SearchOptions(cpus_per_trial=2, tracking_uri=store))
    with pytest.raises(UserError) as refused:
        locate(other, recorder.parent_run_id)
    message = str(refused.value)
    assert "\n" not in message and "epochs 2 (now 3)" in message and "cpus_per_trial 1 (now 2)" in message


def test_search_resume_with_a_run_id_alone_takes_the_spec_and_options_its_parent_recorded(store, tmp_path):
    from gridbench import cli
    from gridbench.gridsearch.resume import recorded_arguments

    parser = cli.build_parser()
    given = ["search", "digits", "--set", "epochs=60", "--grid", "hidden_units=16,32", "--cpus-per-trial", "1"]
    args = parser.parse_args(given)
    recorded = cli._resume_arguments(args, "cpu")
    assert recorded == ["digits", "--device", "cpu", "--cpus-per-trial", "1"] + given[2:6]
    plan = plan_search(cli._load(args), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    recorder = _recorded_search(plan, tags={schema.RESUME_ARGUMENTS: __import__("json").dumps(recorded)})
    recorder.finish(None, schema.SearchStatus.KILLED, "stopped by SIGINT")
    run_id = recorder.parent_run_id
    assert recorded_arguments(store, run_id) == recorded

    argv = ["search", "--resume", run_id, "--tracking-uri", store]
    resumed = cli._recorded_search(parser, parser.parse_args(argv), argv)
    assert resumed.experiment == "digits" and resumed.resume == run_id and resumed.tracking_uri == store
    again = plan_search(cli._load(resumed), SearchOptions(cpus_per_trial=resumed.cpus_per_trial, tracking_uri=store))
    assert again.spec.spec_hash == plan.spec.spec_hash and locate(again, run_id).remaining == 4

    argv = ["search", "--resume", run_id, "--tracking-uri", store, "--set", "epochs=6"]
    changed = cli._recorded_search(parser, parser.parse_args(argv), argv)  # a flag given is taken over the record's
    other = plan_search(cli._load(changed), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    with pytest.raises(UserError, match=r"epochs 60 \(now 6\)"):
        locate(other, run_id)


def test_a_search_recorded_before_its_arguments_resumes_from_its_command_line(store):
    from gridbench.gridsearch.resume import recorded_arguments

    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    command = "gridbench search digits --device both --set epochs=2 --resume 0123456789abcdef0123456789abcdef -n"
    recorder = _recorded_search(plan, tags={schema.COMMAND: command})
    assert recorded_arguments(store, recorder.parent_run_id) == ["digits", "--device=cpu", "--set", "epochs=2", "-n"]
    python = _recorded_search(plan, tags={schema.COMMAND: "python train.py"})
    with pytest.raises(UserError, match="its spec and options were not recorded"):
        recorded_arguments(store, python.parent_run_id)


def test_the_resume_command_names_the_store_only_where_it_is_not_the_default(tmp_path, monkeypatch):
    from gridbench.tracking.stale import resume_command

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resume_command("abc", f"sqlite:///{tmp_path}/mlflow.db") == "gridbench search --resume abc"
    assert resume_command("abc", "sqlite:////elsewhere/m.db") == (
        "gridbench search --resume abc --tracking-uri sqlite:////elsewhere/m.db"
    )


def test_resuming_a_finished_search_has_nothing_to_run(store):
    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    recorder = _recorded_search(plan, finished=[({"hidden_units": 32}, 0)])
    recorder.finish(None, schema.SearchStatus.FINISHED)
    assert locate(plan, recorder.parent_run_id).remaining == 0


def test_a_search_left_running_by_a_dead_driver_reads_as_killed_and_offers_resume(store):
    from gridbench.tracking import read_search

    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid is now dead
    driver = {
        schema.DRIVER_HOST: __import__("socket").gethostname(),
        schema.DRIVER_PID: str(gone.pid),
        schema.DRIVER_STARTED: "1.000",
    }
    stale = _recorded_search(plan, tags=driver)
    alive = _recorded_search(plan, tags={**driver, schema.DRIVER_PID: str(os.getpid())})

    read_search(store, stale.parent_run_id)
    parents = {p.info.run_id: p for p in search_runs(store)[0]}
    assert parents[stale.parent_run_id].info.status == "KILLED"
    assert f"--resume {stale.parent_run_id}" in parents[stale.parent_run_id].data.tags[schema.ERROR]
    read_search(store, alive.parent_run_id)
    assert parents[alive.parent_run_id].info.status == "RUNNING"  # its driver (this process's pid) is alive


def test_the_lean_ui_shows_a_search_left_running_by_a_dead_driver_as_killed(store):
    from gridbench.tracking.ui import pages

    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store))
    gone = subprocess.Popen(["true"])
    gone.wait()
    host = __import__("socket").gethostname()
    driver = {schema.DRIVER_HOST: host, schema.DRIVER_PID: str(gone.pid), schema.DRIVER_STARTED: "1.000"}
    stale = _recorded_search(plan, tags=driver)
    pages("http://ui", store, None)  # `gridbench ui` asks for its pages before it serves them
    (parent,), _ = search_runs(store)
    assert parent.info.run_id == stale.parent_run_id and parent.info.status == "KILLED"


def _watched(tmp_path, keep=False):
    """A watchdog guarding a shell and the sleep it started (as a raylet starts workers), in a search directory."""
    from gridbench.gridsearch.lifecycle import SearchDirectory, Watchdog

    directory = SearchDirectory(keep=keep)
    (directory.path / "ray").mkdir()
    shell = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    deadline = time.time() + 5
    while not psutil.Process(shell.pid).children() and time.time() < deadline:
        time.sleep(0.05)
    (sleeper,) = psutil.Process(shell.pid).children()
    watchdog = Watchdog(directory)
    stranger = subprocess.Popen(["sleep", "60"])  # handed over with another start time: a reused pid, not ours
    watchdog.guard({shell.pid: psutil.Process(shell.pid).create_time(), stranger.pid: 1.0})
    # Never guarded, and below none that is: found by the search's directory on its command line, as Ray's are.
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={directory.path}/ray"])
    return directory, watchdog, shell, sleeper, stranger, orphan


@pytest.mark.parametrize("keep", [False, True])
def test_the_watchdog_ends_what_it_guards_and_the_directory_when_the_driver_dies(tmp_path, keep):
    directory, watchdog, shell, sleeper, stranger, orphan = _watched(tmp_path, keep)
    # A user's command naming a file in the directory, not in an option as Ray does: not the search's to end.
    reader = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", f"{directory.path}/ray/log"])
    # Another search's Ray, in a directory whose name begins with this one's: not this search's either.
    neighbour = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--temp-dir={directory.path}x/ray"]
    )
    try:
        watchdog._process.stdin.close()  # what the kernel does to the pipe when the driver dies, however
        assert shell.wait(timeout=10) == -signal.SIGTERM
        assert psutil.wait_procs([sleeper], timeout=10)[1] == []  # started after the list was sent: found below it
        assert orphan.wait(timeout=10) == -signal.SIGTERM
        assert watchdog._process.wait(timeout=10) == 0
        assert directory.path.exists() == keep
        assert stranger.poll() is None and reader.poll() is None and neighbour.poll() is None
    finally:
        for process in (shell, stranger, orphan, reader, neighbour):
            process.kill()
        shutil.rmtree(directory.path, ignore_errors=True)


def test_the_watchdog_leaves_when_the_driver_cleaned_up_itself(tmp_path):
    directory, watchdog, shell, sleeper, stranger, orphan = _watched(tmp_path)
    try:
        watchdog.leave()
        assert watchdog._process.returncode == 0
        assert shell.poll() is None and sleeper.is_running() and orphan.poll() is None and directory.path.exists()
    finally:
        for process in (shell, stranger, orphan):
            process.kill()
        sleeper.kill()
        shutil.rmtree(directory.path, ignore_errors=True)


ORDERS = ("raylet ends first", "raylet ends first, nothing recorded", "raylet ends after the driver said ending",
          "raylet ends after the ending file, its line unread", "driver dies first")  # fmt: skip


@pytest.mark.parametrize("order", ORDERS)
def test_the_watchdog_names_a_node_death_by_the_raylet_ending_while_the_driver_runs(
    tmp_path, capfd, order, monkeypatch
):
    """A raylet that ends while its driver still runs (no word in its log: killed, or its last lines held back by
    a busy machine) means Ray's node died: the watchdog says so in one line. Not once the driver has said that it
    ends Ray itself, even with the raylet's log saying its shutdown began; not for a raylet that outlives its
    driver (a driver killed outright): that one is ended with it, silently."""
    from gridbench.gridsearch.lifecycle import SearchDirectory, Watchdog
    from gridbench.gridsearch.watchdog import DRIVER_AFTER_RAYLET_ENV, ENDING_FILE

    monkeypatch.setenv(DRIVER_AFTER_RAYLET_ENV, "600")  # this test's process is the driver: never to be ended
    directory = SearchDirectory(keep=False)
    logs = directory.path / "ray" / "session_1" / "logs"
    logs.mkdir(parents=True)
    raylet = subprocess.Popen(["sleep", "60"])
    watchdog = Watchdog(directory)
    try:
        started = psutil.Process(raylet.pid).create_time()
        watchdog.guard({raylet.pid: started})  # as the driver guards every Ray process
        watchdog.guard_raylet(raylet.pid, started)
        if order != "raylet ends first, nothing recorded":
            watchdog.describe_search({"journal": str(tmp_path / "no-journal"), "tracking_uri": str(tmp_path / "s"),
                                      "parent_run_id": "abc", "resume": "gridbench search digits --resume abc",
                                      "trials_total": 2, "ray_dir": str(directory.path / "ray")})  # fmt: skip
        if order == "raylet ends after the driver said ending":
            watchdog.ending()
            (logs / "raylet.out").write_text("Raylet graceful shutdown triggered with death info: SIGTERM\n")
        if order == "raylet ends after the ending file, its line unread":  # as on a busy machine: the file decides
            (directory.path / ENDING_FILE).touch()
        if order != "driver dies first":
            raylet.kill()
            raylet.wait()
            time.sleep(1.0)  # for the watcher to see it
        watchdog._process.stdin.close()  # the driver's end, as the kernel closes the pipe
        assert watchdog._process.wait(timeout=60) == 0
        said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("gridbench:")]
        expected = {
            "raylet ends first": "gridbench: stopped: the search's Ray node died (its raylet ended); ",
            "raylet ends first, nothing recorded": "gridbench: stopped: the search's Ray node died before it recorded",
        }.get(order)
        assert len(said) == (expected is not None) and all(line.startswith(expected) for line in said), said
        if order == "driver dies first":
            assert raylet.wait(timeout=10) == -signal.SIGTERM
    finally:
        raylet.kill()
        shutil.rmtree(directory.path, ignore_errors=True)


def test_a_driver_that_goes_on_after_its_raylet_ended_is_ended_and_the_node_death_said(tmp_path):
    """A driver whose raylet ended and which does not end by itself (Ray's core worker recovering lost objects
    went on for minutes) is ended by the watchdog after a grace, which then says why in one line."""
    from trainings import PROGRAMS

    from gridbench.gridsearch.watchdog import DRIVER_AFTER_RAYLET_ENV

    command = [sys.executable, str(PROGRAMS / "watched_driver.py"), str(tmp_path / "no-journal"), str(tmp_path / "s")]
    env = {**os.environ, DRIVER_AFTER_RAYLET_ENV: "1"}  # the grace, shortened: what is checked is what follows it
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        raylet_pid, directory = driver.stdout.readline().split()
        os.kill(int(raylet_pid), signal.SIGKILL)
        out, err = driver.communicate(timeout=120)  # stderr ends with the watchdog
        assert driver.returncode == -signal.SIGKILL
        said = [line for line in err.splitlines() if line.startswith("gridbench:")]
        assert len(said) == 1 and said[0].startswith("gridbench: stopped: the search's Ray node died (its raylet"), err
        assert not Path(directory).exists()
    finally:
        driver.kill()


def test_the_store_opens_early_once_and_only_for_a_local_ray(store):
    from gridbench.gridsearch.ray_session import RaySession
    from gridbench.tracking.journaled import JournaledRecorder

    local = plan_search(digits(), SearchOptions(tracking_uri=store, backend="tensorflow"))
    session = RaySession(open_store_early=True)
    try:
        session.planned(local)
        recorder, stale = session.take_store().result(timeout=60)
        assert isinstance(recorder, JournaledRecorder) and recorder.parent_run_id is None and stale == []
        assert session.take_store() is None  # taken once: run_search opens none of its own then
    finally:
        session.stop()
    cluster = plan_search(digits(), SearchOptions(tracking_uri=store, backend="tensorflow", address="127.0.0.1:1"))
    session = RaySession(open_store_early=True)
    try:
        session.planned(cluster)  # a bad --address must leave no store: it opens once Ray has joined
        assert session.take_store() is None
    finally:
        session.stop()
    unasked = RaySession()
    try:
        unasked.planned(local)  # --resume reads the store before the search writes it
        assert unasked.take_store() is None
    finally:
        unasked.stop()


# --- slow: real Ray ----------------------------------------------------------------------------------------------


def _is_ray_worker(process: psutil.Process) -> bool:
    """A Ray worker: "ray::IDLE" (or its task) once started, default_worker.py while it starts; not the raylet."""
    command = process.cmdline()
    if not command or process.name() == "raylet":
        return False
    return command[0].startswith("ray::IDLE") or any(part.endswith("default_worker.py") for part in command)


@pytest.mark.slow
def test_a_local_ray_starts_no_worker_before_a_trial_asks_for_one(monkeypatch):
    """Ray starts no idle worker of its own (one per core by default): a search asks for the ones its trials need,
    as soon as Ray is up (RaySession.prestart, given no plan here), or each trial's is started when it is due."""
    import gc

    import ray

    from gridbench.gridsearch.ray_session import RaySession

    session = RaySession()
    at_shutdown = []
    shutdown = ray.shutdown

    def watched_shutdown():
        at_shutdown.append((gc.isenabled(), [t.name for t in threading.enumerate()]))
        shutdown()

    monkeypatch.setattr(ray, "shutdown", watched_shutdown)
    try:
        session.start(SearchOptions(), cpus=2, gpus=0)
        time.sleep(1.0)  # Ray starts its idle workers asynchronously, within a second on this machine
        workers = [p.cmdline() for p in psutil.Process().children(recursive=True) if _is_ray_worker(p)]
        assert workers == []
        assert "PythonGCThread" in [t.name for t in threading.enumerate()]  # Ray's collector, the one stopped below
    finally:
        session.stop()
    # A collection freeing an object reference mid-shutdown ends Ray's driver with status 1 (Ray's QuickExit):
    # while Ray shuts down, no thread collects, neither by allocating nor Ray's own collector.
    ((collecting, threads),) = at_shutdown
    assert not collecting and "PythonGCThread" not in threads and gc.isenabled()


def _search_command(store: str, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gridbench",
        "search",
        "digits",
        "--cpus-per-trial",
        "1",
        "--tracking-uri",
        store,
        *args,
    ]


def _environment(tmp_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env["TMPDIR"] = str(tmp_dir)  # the search's directory (and Ray's session) go here: it must be empty after
    return env


class ProcessTree:
    """Every process a driver started, noted while it runs (pid and start time), to check and end by PID."""

    def __init__(self, pid: int):
        self.driver = psutil.Process(pid)
        self.seen: dict[int, tuple[float, str]] = {}

    def note(self) -> list[str]:
        try:
            children = self.driver.children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            try:
                self.seen[child.pid] = (child.create_time(), child.name())  # Ray renames its workers
            except psutil.Error:
                pass
        return [name for _, name in self.seen.values()]

    def wait_for(self, name_part: str, popen: subprocess.Popen, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while not any(name_part in name for name in self.note()):
            if popen.poll() is not None:
                out, err = popen.communicate()
                pytest.fail(f"the search ended (exit {popen.returncode}) before a {name_part} process: {out}{err}")
            assert time.time() < deadline, f"no {name_part} process under the driver: {self.note()}"
            time.sleep(0.3)

    def alive(self) -> list[psutil.Process]:
        alive = []
        for pid, (started, _) in self.seen.items():
            try:
                process = psutil.Process(pid)
                if process.create_time() == started and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.Error:
                pass
        return alive

    def listening(self) -> set[str]:
        addresses = set()
        for process in self.alive():
            try:
                addresses |= {c.laddr.ip for c in process.net_connections("inet") if c.status == psutil.CONN_LISTEN}
            except psutil.Error:
                pass
        return addresses

    def end(self) -> None:
        for process in self.alive():
            process.kill()


@pytest.mark.slow
def test_sigterm_kills_the_parent_records_running_trials_and_leaves_nothing(tmp_path, store):
    tmp_dir = Path(tempfile.mkdtemp(prefix="gbt-", dir="/tmp"))  # short: Ray's socket paths live under it
    driver = subprocess.Popen(
        _search_command(store, "--set", "epochs=5000", "--set", "learning_rate=0.01", "--grid", "hidden_units=16,32"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(tmp_dir),
        cwd=tmp_path,
    )
    tree = ProcessTree(driver.pid)
    try:
        tree.wait_for("ImplicitFunc", driver)  # a trial's worker is running
        time.sleep(2)
        listening = tree.listening()
        tree.note()
        stopped_at = time.time()
        driver.send_signal(signal.SIGTERM)
        out, err = driver.communicate(timeout=120)
        assert driver.returncode == 143, out + err
        assert err.count("\n") == 1 and err.startswith("gridbench: stopped by SIGTERM; search "), err
        assert "--resume" in err
        assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening  # local Ray: loopback only
        assert tree.alive() == []  # every process the search started has ended
        assert list(tmp_dir.iterdir()) == []  # its directory and Ray's session are gone

        (parent,), children = search_runs(store)
        assert parent.info.status == "KILLED" and parent.data.tags[schema.ERROR] == "stopped by SIGTERM"
        assert parent.data.tags[schema.DRIVER_PID] == str(driver.pid)
        assert sorted(c.data.params["hidden_units"] for c in children) == ["16", "32"]
        for child in children:
            assert child.info.status == "KILLED" and child.data.tags[schema.ENDED_BY] == "SIGTERM"
            # The time it had reaches the stop (MLflow keeps milliseconds, floored), whatever the machine's load.
            assert child.data.metrics[schema.TRIAL_WALL_S] > 0 and child.info.end_time / 1000 >= stopped_at - 0.002
            assert child.info.end_time - child.info.start_time == pytest.approx(
                child.data.metrics[schema.TRIAL_WALL_S] * 1000, abs=5
            )
    finally:
        if driver.poll() is None:
            driver.kill()
        tree.end()
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _pasted(text: str) -> list[str]:
    """The command a hint prints between backticks, as a user pastes it (`gridbench` is this interpreter's)."""
    import re
    import shlex

    (command,) = re.findall(r"`(gridbench search [^`]*)`", text)
    return [sys.executable, "-m", *shlex.split(command)]


# One search, stopped twice and resumed twice, read by the two tests below: SIGKILL in its first session, the hint
# the store then records pasted as the second, Ctrl-C in that one, then the hint it printed pasted as the third,
# which finishes it. One search started fewer than a search for each test (a search's start is most of its cost).
# Trials of 20 epochs, so that trials are still to run when each stop comes, on a fast machine too: there
# (2026-11-26) a digits trial after a worker's first took 0.33-0.49 s at 2 epochs and 1.6-1.8 s at 20.
STOPPED_GRID = ("16", "32", "64", "128")


def _until_finished(store: str, count: int, driver: subprocess.Popen, tree: ProcessTree | None = None) -> int:
    """Polls the store until `count` trials are FINISHED, the driver still running (its processes noted)."""
    deadline = time.time() + 240
    while (finished := sum(c.info.status == "FINISHED" for c in search_runs(store)[1])) < count:
        assert time.time() < deadline and driver.poll() is None, f"no {count} trial(s) finished"
        if tree is not None:
            tree.note()
        time.sleep(0.5)
    return finished


def _sigkilled_session(store: str, cwd: Path) -> dict:
    """The first session, killed by SIGKILL once a trial has finished: the trials it finished, the processes it
    started and its directory after the watchdog's clean-up."""
    command = _search_command(store, "--set", "learning_rate=0.01", "--set", "epochs=20", "--max-concurrent", "1")
    command += ["--grid", "hidden_units=" + ",".join(STOPPED_GRID)]
    tmp_dir = Path(tempfile.mkdtemp(prefix="gbt-", dir="/tmp"))  # short: Ray's socket paths live under it
    env = _environment(tmp_dir)
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    tree = ProcessTree(driver.pid)
    try:
        finished = _until_finished(store, 1, driver, tree)
        tree.note()
        during = list(tmp_dir.iterdir())
        driver.kill()
        driver.wait()
        # The driver cannot clean up after a SIGKILL: its watchdog ends what Ray started and removes the directory.
        deadline = time.time() + 10
        while (tree.alive() or list(tmp_dir.iterdir())) and time.time() < deadline:
            time.sleep(0.2)
        alive, after = [p.name() for p in tree.alive()], list(tmp_dir.iterdir())
    finally:
        tree.end()  # only if the watchdog failed
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return {"finished": finished, "dir_during": during, "alive_after": alive, "dir_after": after}


def _ctrl_c_session(store: str, cwd: Path, command: list[str], finished_before: int) -> dict:
    """A session run from `command`, interrupted by Ctrl-C once one more trial has finished: its exit code, output
    and the trials finished by then."""
    tmp_dir = Path(tempfile.mkdtemp(prefix="gbt-", dir="/tmp"))
    driver = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_environment(tmp_dir), cwd=cwd
    )
    try:
        _until_finished(store, finished_before + 1, driver)
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
        shutil.rmtree(tmp_dir, ignore_errors=True)
    finished = sum(c.info.status == "FINISHED" for c in search_runs(store)[1])
    return {"returncode": driver.returncode, "out": out, "err": err, "finished": finished}


@pytest.fixture(scope="module")
def stopped_twice(tmp_path_factory) -> dict:
    """The search above, its three sessions: what each printed and left, and the hints pasted."""
    from gridbench.tracking import read_search

    cwd = tmp_path_factory.mktemp("stopped-twice")
    store = new_store(cwd)  # the default store in `cwd`, where the sessions run
    first = _sigkilled_session(store, cwd)
    (after_kill,), _ = search_runs(store)
    # The dead driver's hint, as the next command that reads the store records it, pasted as it is.
    read_search(store, after_kill.info.run_id)
    (killed,), _ = search_runs(store)
    stored_hint = _pasted(killed.data.tags[schema.ERROR])
    second = _ctrl_c_session(store, cwd, stored_hint, first["finished"])
    assert second["returncode"] == 130, second["out"] + second["err"]
    tmp_dir = Path(tempfile.mkdtemp(prefix="gbt-", dir="/tmp"))
    try:
        third = subprocess.run(
            _pasted(second["err"]), capture_output=True, text=True, env=_environment(tmp_dir), cwd=cwd, timeout=300
        )
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return {
        **{"store": store, "cwd": cwd, "run_id": after_kill.info.run_id, "first": first, "second": second},
        **{"status_after_kill": after_kill.info.status, "killed": killed, "stored_hint": stored_hint, "third": third},
    }


def _finished_once_in_three_sessions(stopped_twice: dict):
    """The search after its third session: finished, every configuration once, under the first session's parent."""
    third = stopped_twice["third"]
    assert third.returncode == 0, third.stdout + third.stderr
    (after,), children = search_runs(stopped_twice["store"])
    assert after.info.run_id == stopped_twice["run_id"] and after.info.status == "FINISHED"
    finished = sorted(c.data.params["hidden_units"] for c in children if c.info.status == "FINISHED")
    assert finished == sorted(STOPPED_GRID)  # every configuration exactly once
    assert after.data.metrics["trials_finished"] == len(STOPPED_GRID) and after.data.metrics["sessions"] == 3
    return after


@pytest.mark.slow
def test_sigkill_then_resume_runs_only_the_missing_trials_under_the_same_parent(stopped_twice):
    first, store, run_id = stopped_twice["first"], stopped_twice["store"], stopped_twice["run_id"]
    assert first["dir_during"], "the search's directory was not under TMPDIR"
    assert first["alive_after"] == []  # Ray's processes and the watchdog, by PID
    assert first["dir_after"] == []
    assert stopped_twice["status_after_kill"] == "RUNNING"  # nothing wrote its end: the driver was killed outright
    assert stopped_twice["killed"].info.status == "KILLED"  # as the next command that read the store found it
    assert stopped_twice["stored_hint"][3:] == ["search", "--resume", run_id, "--tracking-uri", store]
    total = len(STOPPED_GRID)
    assert (
        f"resuming search {run_id}: {total - first['finished']} of {total} trials to run"
        in (stopped_twice["second"]["out"])
    )
    after = _finished_once_in_three_sessions(stopped_twice)
    assert after.data.metrics["trials_resumed"] == stopped_twice["second"]["finished"]  # before the last session
    third = stopped_twice["third"]
    assert "This session (session 3, resumed)" in third.stdout
    assert f"The whole search: {total} of {total} trials" in third.stdout


@pytest.mark.slow
def test_ctrl_c_prints_a_resume_command_that_continues_the_search_when_pasted(stopped_twice):
    """The issue's first point: after Ctrl-C the hint, typed as shown, runs the rest with the same spec and options."""
    run_id, second, third = stopped_twice["run_id"], stopped_twice["second"], stopped_twice["third"]
    hint = _pasted(second["err"])
    assert hint[3:] == ["search", "--resume", run_id]  # the store is the default where it ran: not named
    after = _finished_once_in_three_sessions(stopped_twice)
    total = len(STOPPED_GRID)
    assert f"{total - second['finished']} of {total} trials to run" in third.stdout
    assert after.data.params["epochs"] == "20"  # the spec as it first ran
    # The final table and summary cover the whole search, every session; this session's figures are labelled.
    assert f"{total} finished, 0 failed" in third.stdout
    assert f"{second['finished']} finished in earlier sessions" in third.stdout
    assert f"The whole search: {total} of {total} trials finished over 3 sessions" in third.stdout
    assert after.data.metrics[schema.SEARCH_MAKESPAN_S] > after.data.metrics[schema.MAKESPAN_S]

    # An option changed on resume is still refused, with the option named.
    changed = subprocess.run(hint + ["--set", "epochs=6"], capture_output=True, text=True, cwd=stopped_twice["cwd"])
    assert changed.returncode == 2 and "epochs 20 (now 6)" in changed.stderr, changed.stderr


def _kill_worker_when_it_starts(pid_dir, found: list) -> threading.Thread:
    def kill():
        deadline = time.time() + 120
        while time.time() < deadline and not list(pid_dir.glob("*.pid")):
            time.sleep(0.1)
        pid = int(next(pid_dir.glob("*.pid")).read_text())
        found.append(pid)
        os.kill(pid, signal.SIGKILL)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow
@pytest.mark.parametrize("retries", [0, 1])
def test_a_worker_killed_mid_trial_is_recorded_with_rays_reason_and_retried(tmp_path, store, monkeypatch, retries):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    monkeypatch.setenv("GRIDBENCH_TEST_PID_DIR", str(pid_dir))
    plan = plan_search(digits(("32",)), SearchOptions(cpus_per_trial=1, tracking_uri=store, retries=retries))
    killed: list[int] = []
    killer = _kill_worker_when_it_starts(pid_dir, killed)
    result = run_search(plan, runner=fakes.waits_to_be_killed)
    killer.join()

    (parent,), children = search_runs(store)
    children.sort(key=lambda c: c.data.tags[schema.ATTEMPT])
    died = children[0]
    assert died.info.status == "FAILED" and died.data.tags[schema.ATTEMPT] == "1"
    assert died.data.tags[schema.ERROR].startswith("ActorDiedError: The actor died unexpectedly")
    assert "Worker exit detail" in died.data.tags[schema.ERROR]
    assert died.data.metrics[schema.TRIAL_WALL_S] > 0 and died.info.end_time > died.info.start_time
    if retries:
        assert died.data.tags[schema.RETRIED] == "true"
        assert [c.info.status for c in children] == ["FAILED", "FINISHED"]
        assert children[1].data.tags[schema.ATTEMPT] == "2"
        assert result.summary.trials_finished == 1 and result.summary.trials_failed == 0
    else:
        assert len(children) == 1 and schema.RETRIED not in died.data.tags
        assert result.summary.trials_failed == 1
    assert parent.info.status == "FINISHED"


def test_kill_matching_kills_only_the_search_s_processes_whose_command_line_matches(tmp_path):
    from gridbench.gridsearch.lifecycle import OwnProcesses

    own = OwnProcesses()
    # Like Ray's autoscaler monitor: SIGTERM is caught, and the process would linger.
    script = tmp_path / "autoscaler_monitor.py"
    script.write_text("import signal, time\nsignal.signal(signal.SIGTERM, lambda *a: time.sleep(30))\ntime.sleep(60)\n")
    monitor = subprocess.Popen([sys.executable, str(script)])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        own.note()
        assert own.kill_matching("autoscaler_monitor.py") == 1
        monitor.wait(timeout=5)  # gone at once, although SIGTERM would have kept it 30 s
        assert other.poll() is None and [p.pid for p in own.alive()] == [other.pid]
    finally:
        for process in (monitor, other):
            process.kill()
            process.wait()


@pytest.mark.parametrize("named_by", ["title", "script"])
def test_a_ray_process_left_after_ray_s_shutdown_is_killed_at_once_and_other_processes_get_sigterm(tmp_path, named_by):
    from gridbench.gridsearch.lifecycle import OwnProcesses
    from gridbench.gridsearch.ray_session import RAY_WORKER_MARKS

    def start(path: Path, marker: Path, after_sigterm: str, argv0: str | None = None) -> subprocess.Popen:
        """A process that notes a SIGTERM in `marker`, then runs `after_sigterm`; it says when it is ready."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "import pathlib, signal, sys, time\n"
            f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(marker)!r}).touch(), {after_sigterm}))\n"
            "print('ready', flush=True)\ntime.sleep(60)\n"
        )
        return subprocess.Popen([argv0 or sys.executable, str(path)], executable=sys.executable, stdout=subprocess.PIPE,
                                text=True)  # fmt: skip

    # A Ray worker once titled ("ray::ImplicitFunc"), or before, by its script; the other, any process of the search.
    # Each notes a SIGTERM; the worker's stand-in would then linger, so the test also shows it was not waited for.
    worker_termed, other_termed = tmp_path / "worker-termed", tmp_path / "other-termed"
    processes = []
    try:
        script = "trial.py" if named_by == "title" else "ray/_private/workers/default_worker.py"
        title = "ray::ImplicitFunc" if named_by == "title" else None
        processes.append(start(tmp_path / script, worker_termed, "time.sleep(30)", title))
        processes.append(start(tmp_path / "other.py", other_termed, "sys.exit(0)"))
        assert [process.stdout.readline() for process in processes] == ["ready\n"] * 2  # their handlers are in place
        own = OwnProcesses()  # they are children from before: adopted, as the compiling processes are
        own.adopt(process.pid for process in processes)
        assert own.end(at_once=RAY_WORKER_MARKS) == 2
        assert own.alive() == []
        assert not worker_termed.exists()  # killed without a SIGTERM, so not waited for
        assert other_termed.exists()  # asked first, as before
    finally:
        for process in processes:
            process.kill()
            process.wait()
            process.stdout.close()


def test_a_process_that_has_exited_is_ended_though_its_parent_has_not_reaped_it(tmp_path):
    import psutil

    from gridbench.gridsearch.lifecycle import OwnProcesses

    # As a Ray worker left after Ray's shutdown, an orphan whose reaping is init's, which may come late: here its
    # parent never reaps it. Waiting for the pid to be gone would take the whole grace, twice.
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
         "print(child.pid, flush=True)\ntime.sleep(120)\n"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    child = None
    try:
        child = int(parent.stdout.readline())
        own = OwnProcesses()  # both are children from before: only the adopted one is the search's
        own.adopt([child])
        started = time.monotonic()
        assert own.end(grace_s=60) == 1
        assert time.monotonic() - started < 30  # not the grace: it ended at its SIGTERM
        assert psutil.Process(child).status() == psutil.STATUS_ZOMBIE  # exited, not reaped
        assert own.alive() == [] and parent.poll() is None
    finally:
        if child is not None and psutil.pid_exists(child):  # a failure before the end: no sleeper left behind
            os.kill(child, signal.SIGKILL)
        parent.kill()
        parent.wait()
        parent.stdout.close()


def test_a_resumed_searchs_summary_gives_the_whole_search_first_then_labels_this_sessions_figures():
    from gridbench.gridsearch.progress import summary_lines
    from gridbench.tracking.records import SearchSummary

    resumed = SearchSummary(6, 6, 0, 2, 8.3, 1.0, 2.0, 11.0, 0.97, session=2, trials_resumed=3, earlier_makespan_s=12.1)
    whole, *session = summary_lines(resumed, "test_accuracy")
    assert whole == (
        "The whole search: 6 of 6 trials finished over 2 sessions, in 20.4 s of makespan (earlier sessions 12.1 s, "
        "3 trials); best test_accuracy 0.97."
    )
    assert session[0] == "This session (session 2, resumed) took 8.3 s (makespan) for 3 trials, up to 2 at a time."
    assert resumed.metrics()[schema.SEARCH_MAKESPAN_S] == pytest.approx(20.4)
    once = summary_lines(SearchSummary(4, 4, 0, 1, 18.0, 1.0, 2.0, 13.7, 0.97), "test_accuracy")
    assert once[0] == "The search took 18.0 s (makespan) for 4 trials, up to 1 at a time."
    assert once[1].startswith("One at a time, its trials' own times add up to 13.7 s: the search took 31% longer")
