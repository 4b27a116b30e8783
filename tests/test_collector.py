"""A process's start-up without the cyclic garbage collector (gridbench.collector).

The collector is the whole process's, so each check runs in a fresh interpreter: the test process's own is left alone.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(script: str, tmp_path) -> None:
    code = textwrap.dedent(script)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ok"), done.stdout


def test_a_start_up_runs_without_the_collector_then_its_objects_are_frozen_once_per_process(tmp_path):
    _run(
        """
        import gc
        from gridbench import collector
        collector.pause_for_startup()
        assert not gc.isenabled()
        kept = [{"n": i} for i in range(1000)]
        collector.resume_after_startup()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        frozen = gc.get_freeze_count()
        collector.pause_for_startup()  # a worker's next trial: the collector stays on, nothing more is frozen
        assert gc.isenabled()
        collector.resume_after_startup()
        assert gc.get_freeze_count() == frozen
        print("ok")
        """,
        tmp_path,
    )


def test_the_start_ups_garbage_cycles_are_collected_not_frozen(tmp_path):
    # A cycle holding a database connection must be closed when the collector comes back, not kept for good.
    _run(
        """
        import gc, weakref
        from gridbench import collector
        collector.pause_for_startup()
        closed = []
        class Connection:
            pass
        cycle = Connection()
        cycle.me = cycle
        weakref.finalize(cycle, closed.append, "closed")
        del cycle
        junk = [[] for _ in range(20000)]  # enough allocations for several collections, were it on
        assert closed == []
        collector.resume_after_startup()
        assert closed == ["closed"]
        print("ok")
        """,
        tmp_path,
    )


def test_a_process_that_did_not_pause_finds_the_collector_as_it_left_it(tmp_path):
    # The API's searches run in a user's process or a test's: run_search's resume changes nothing there.
    _run(
        """
        import gc
        from gridbench import collector
        collector.resume_after_startup()
        assert gc.isenabled() and gc.get_freeze_count() == 0
        gc.disable()  # a user's choice stays theirs
        collector.pause_for_startup()
        collector.resume_after_startup()
        assert not gc.isenabled() and gc.get_freeze_count() == 0
        print("ok")
        """,
        tmp_path,
    )


def test_the_command_line_turns_the_collector_back_on_before_a_command_other_than_search(tmp_path):
    _run(
        f"""
        import gc
        from gridbench import cli, collector
        collector.pause_for_startup()  # as cli.run does
        code = cli.main(["report", "0123", "--tracking-uri", "sqlite:///{tmp_path}/none.db"])
        assert code == 2, code  # no store there: one line, and the collector on again all the same
        assert gc.isenabled() and gc.get_freeze_count() > 0
        print("ok")
        """,
        tmp_path,
    )


def test_a_command_line_search_keeps_the_collector_paused_until_its_first_trial_has_started(tmp_path):
    # The driver's pause lasts past the search's start (search_runner's _start_parent, before Tune's start) and ends
    # at the end of Tune's first step in which a trial's actor has started, its work sent (the recording callback):
    # the one collection then runs while the driver waits for that trial. Were the callback's call lost, a
    # command-line search would run without cyclic collection until fit returned. Ray's start and the store are
    # stubbed: what is checked is the collector around them, in a process of its own.
    _run(
        """
        import gc, types
        from concurrent.futures import Future
        import ray
        from gridbench import collector
        from gridbench.gridsearch import search_runner
        from gridbench.gridsearch.tune_callback import RecordingCallback
        started = []
        class Recorder:
            def start(self, **run):
                started.append(gc.isenabled())
        opened = Future()
        opened.set_result((Recorder(), []))  # the store's opening, done (store_opening)
        search_runner.start_search = lambda plan, open_recorder, session: (opened, 0.0, {"CPU": 2.0})
        search_runner.search_tags = search_runner.search_params = search_runner.placement_params = lambda *a: {}
        search_runner.search_run_name = lambda plan, resources: "run"
        search_runner.driver_tags = lambda: {}
        search_runner.environment = types.SimpleNamespace(collect=lambda: {})
        ray.nodes = lambda: []
        plan = types.SimpleNamespace(
            concurrency_on=lambda cpus, gpus: 1, spec=types.SimpleNamespace(to_dict=dict), tracking_uri="sqlite://"
        )
        collector.pause_for_startup()  # as cli.run does
        # how its Ray started (a tag of the parent run); the watchdog told of the parent
        session = types.SimpleNamespace(
            ray_start="lean", trial_workers="runtime_env", describe_search=lambda plan, recorder: None
        )
        search_runner._start_parent(plan, None, session, {}, None)[0].ready()  # the parent started on its thread
        assert started == [False] and not gc.isenabled(), started  # Tune has not started yet
        callback = RecordingCallback(Recorder(), {}, {}, None)
        callback.on_step_end(iteration=1, trials=[])  # Tune's first steps: the trial's actor is still starting
        assert not gc.isenabled()
        callback.on_trial_start(iteration=2, trials=[], trial=types.SimpleNamespace(trial_id="t1", config={}))
        callback.on_step_end(iteration=2, trials=[])
        assert gc.isenabled() and gc.get_freeze_count() > 0
        print("ok")
        """,
        tmp_path,
    )


def test_held_blocks_keep_the_collector_off_until_the_last_ends_then_restore_it_as_it_was(tmp_path):
    _run(
        """
        import gc, threading
        from gridbench import collector
        assert gc.isenabled()
        first_in, second_done, first_out = threading.Event(), threading.Event(), threading.Event()
        seen = {}

        def beside():  # a second block on another thread, begun and ended inside the first
            first_in.wait()
            with collector.held():
                seen["inner"] = gc.isenabled()
            seen["after_inner"] = gc.isenabled()  # the first block still holds it
            second_done.set()

        thread = threading.Thread(target=beside)
        thread.start()
        with collector.held():
            first_in.set()
            second_done.wait()
        thread.join()
        assert seen == {"inner": False, "after_inner": False} and gc.isenabled()
        gc.disable()  # off before: off after
        with collector.held():
            pass
        assert not gc.isenabled()
        print("ok")
        """,
        tmp_path,
    )
