"""Compiling a search's programs ahead, in processes of their own, while Ray starts (gridsearch.precompile)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from stores import new_store
from test_cli import gridbench
from test_search import runs_of

from gridbench.gridsearch import SearchOptions, backends, plan_search
from gridbench.gridsearch.precompile import Precompiler, process_count, program_count
from gridbench.gridsearch.tuning import trial_context
from gridbench.spec import load_spec
from gridbench.tracking import schema
from gridbench.trial.precompile import READY_DIR, all_ready, mark_ready, ready_name


def _plan(execution: str = "trials", **options):
    params = {"train_loop": options.pop("train_loop")} if "train_loop" in options else {}
    spec = load_spec("digits").with_overrides(params, {"hidden_units": ["16", "32"], "learning_rate": ["0.1", "0.01"]})
    return plan_search(spec.with_execution(execution), SearchOptions(**{"cpus_per_trial": 1, **options}))


ON = {"compile_ahead": "on"}


@pytest.mark.parametrize(
    "options, expected",
    [
        ({"backend": "jax", "train_loop": "compiled", **ON}, 2),  # two programs: learning rate is state
        ({"backend": "jax", **ON}, 0),  # train_loop auto on a CPU: Keras fit, which compiles in its trials
        ({"backend": "tensorflow", **ON}, 0),
        ({"backend": "jax", "train_loop": "compiled", "compile_cache": "off", **ON}, 0),  # nowhere to leave them
        ({"backend": "jax", "execution": "fused", **ON}, 2),  # one program per group
        ({"backend": "jax", "train_loop": "compiled", "compile_ahead": "off"}, 0),
        # auto, on a CPU: only with 8 cores or more (a CPU's trials wait for every compilation)
        ({"backend": "jax", "train_loop": "compiled", "cpus": 2}, 0),
    ],
)
def test_programs_are_compiled_ahead_only_where_a_trial_could_load_them(options, expected):
    from gridbench.gridsearch.tuning import program_representatives

    plan = _plan(**options)
    assert program_count(plan, len(program_representatives(plan.spec))) == expected


def test_one_process_per_eight_cores_on_a_cpu_four_on_a_gpu_and_never_more_than_programs():
    assert [process_count(programs, 16, "cpu") for programs in (1, 4, 9)] == [1, 2, 2]
    assert [process_count(programs, 16, "gpu") for programs in (1, 4, 9)] == [1, 4, 4]
    assert process_count(8, 2, "cpu") == 1 and process_count(8, 2, "gpu") == 1
    assert process_count(64, 128, "cpu") == process_count(64, 128, "gpu") == 8


def test_the_report_counts_what_was_compiled_loaded_and_failed_and_stop_ends_what_still_runs(tmp_path):
    results = tmp_path / "programs-0.jsonl"
    lines = [  # the driver's launch, the process's preparation (times for a timeline), then its programs
        {"launched_at": 1.0e9},
        {"prepared": True, "started_at": 1.0e9 + 0.2, "imports_s": 2.0, "data_s": 0.5, "at": 1.0e9 + 2.7},
        {"index": 0, "compile_s": 2.5, "cached": False, "wall_s": 2.6},
        {"index": 1, "compile_s": 0.1, "cached": True, "wall_s": 0.1},
        {"index": 2, "error": "ValueError: no", "wall_s": 0.0},
    ]
    results.write_text("".join(json.dumps(line) + "\n" for line in lines))
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    precompiler = Precompiler([sleeper], [str(results)], time.perf_counter())
    report = precompiler.report()
    assert (report.processes, report.programs, report.loaded, report.failed) == (1, 1, 1, 1)
    assert report.compile_sum_s == 2.5
    # Started before Ray (run_search's order), it is still counted among the search's processes.
    from gridbench.gridsearch.lifecycle import OwnProcesses

    own = OwnProcesses()
    assert sleeper.pid not in own.seen
    own.adopt(precompiler.pids)
    assert [p.pid for p in own.alive()] == [sleeper.pid]
    precompiler.stop()
    # Ended by stop's SIGTERM: neither waited out (its 60 s sleep, exit 0) nor killed after the grace (SIGKILL).
    assert sleeper.poll() == -signal.SIGTERM


def test_the_report_says_when_the_last_process_ended_by_the_trials_clock(tmp_path):
    results = tmp_path / "programs-0.jsonl"
    results.write_text(json.dumps({"launched_at": time.time()}) + "\n")
    launched = time.time()
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    precompiler = Precompiler([process], [str(results)], time.perf_counter())
    asked = time.time()
    still = precompiler.report().ended_at
    # While a process still runs, "ended" is the report's own time: it ran at least until then.
    assert process.poll() is None and asked <= still <= time.time()
    precompiler.wait()
    waited = time.time()
    for _ in range(200):  # the watching thread notes the end just after the process's wait returns
        first = precompiler.report().ended_at
        time.sleep(0.02)
        second = precompiler.report().ended_at
        if second == pytest.approx(first, abs=0.005):
            break
    # Unix time, as the trials' started_at: not the report's own time (it moves while a process still runs).
    assert second == pytest.approx(first, abs=0.005) and launched + 0.3 <= first <= waited


def test_a_search_records_how_long_compiling_ran_on_after_its_first_trial_and_says_what_that_means():
    from rich.console import Console
    from test_programs import _trial

    from gridbench.gridsearch import SearchResult
    from gridbench.gridsearch.precompile import PrecompileReport
    from gridbench.gridsearch.progress import print_search
    from gridbench.gridsearch.summary import beside_first_trial, summarise

    first = replace(_trial(64, "no", "no"), started_at=100.0, ended_at=101.0)
    later = replace(_trial(128, "yes", "yes"), started_at=103.0, ended_at=104.0)
    report = PrecompileReport(processes=4, programs=2, wall_s=12.0, ended_at=106.7)
    assert beside_first_trial(report, [later, first]) == pytest.approx(6.7)  # from the first trial's start
    assert beside_first_trial(replace(report, ended_at=99.0), [first]) == 0.0  # ended before any trial began
    assert beside_first_trial(PrecompileReport(loaded=2), [first]) == 0.0  # no process: every program was ready
    assert beside_first_trial(None, [first]) == 0.0

    plan = _plan(backend="jax", train_loop="compiled")
    summary = summarise(plan, [first, later], 1, 4.0, 1.0, 95.0, precompiled=report)
    assert summary.metrics()[schema.PRECOMPILE_BESIDE_FIRST_TRIAL_S] == pytest.approx(6.7)
    parts = {"compile_warmup_s": 0.0, "startup_s": 5.0, "compile_s": 0.6, "worker_start_s": 7.0}
    parts.update(trial_overhead_s=0.9, warmup_s=0.1, training_s=0.6, end_s=0.5)
    told = []
    for beside in (6.7, 0.0):
        console = Console(record=True, width=400)
        summary = replace(summary, account=parts, precompile_beside_first_trial_s=beside)
        print_search(console, SearchResult(plan, "run", "gridbench/digits", (first, later), summary), False)
        told.append(" ".join(console.export_text().split()))
    assert (
        "Compiling ahead ran on for 6.7 s after the first trial began, while the first workers started: how their "
        "wait split between workers' start (7.0 s) and compiling (0.6 s) depends on timing; their sum, 7.6 s, is "
        "what to read."
    ) in told[0]
    assert "Compiling ahead ran on" not in told[1] and "programs compiled ahead: 2 by 4 process(es)" in told[1]


@pytest.mark.slow
def test_a_compiled_loop_search_loads_every_program_its_processes_compiled_while_ray_started(tmp_path):
    store, cache = new_store(tmp_path), tmp_path / "cache"
    # A cache of its own: what other tests' searches left in the shared one would not be compiled again.
    result = gridbench(
        "search", "digits", "--backend", "jax", "--set", "train_loop=compiled", "--set", "epochs=2",
        "--grid", "hidden_units=16,32", "--grid", "learning_rate=0.1,0.01", "--compile-ahead", "on",
        "--compile-cache", "persistent", "--tracking-uri", store, env={"GRIDBENCH_CACHE_DIR": str(cache)},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # Each program the processes compiled is marked ready beside the cache: the next such search starts none.
    assert len(os.listdir(cache / READY_DIR)) == 2
    _, (parent,), children = runs_of(store, "digits")
    metrics = parent.data.metrics
    assert metrics[schema.PROGRAMS_PRECOMPILED] == 2 and metrics[schema.PRECOMPILE_PROCESSES] == 1
    assert parent.data.tags[schema.COMPILE_AHEAD] == "on"
    assert metrics[schema.PROGRAMS_PRECOMPILE_LOADED] == metrics[schema.PROGRAMS_PRECOMPILE_FAILED] == 0
    assert (
        metrics[schema.PRECOMPILE_COMPILE_S] > 0 and metrics[schema.PRECOMPILE_S] > metrics[schema.PRECOMPILE_COMPILE_S]
    )
    # On a CPU the trials start once the compilations have ended; that wait is in the makespan.
    assert 0 <= metrics[schema.PRECOMPILE_WAIT_S] < metrics[schema.MAKESPAN_S] - metrics[schema.TRIAL_WALL_SUM_S]
    # So no trial began beside them, and the account's workers' start and compiling are parts of their own.
    assert metrics[schema.PRECOMPILE_BESIDE_FIRST_TRIAL_S] == 0 and "Compiling ahead ran on" not in result.stdout
    assert "programs compiled ahead: 2 by 1 process(es)" in result.stdout
    sources = sorted((c.data.tags[schema.PROGRAM_CACHED], c.data.tags[schema.PROGRAM_REUSED]) for c in children)
    # Each program's first trial loaded it from the search's cache; the next trial of it found it in its worker.
    assert sources == [("yes", "no"), ("yes", "no"), ("yes", "yes"), ("yes", "yes")]
    assert_read_saved_executables(children)


def assert_read_saved_executables(children) -> None:
    """Each program's first trial read the executables the processes saved, with no tracing (saved_programs)."""
    firsts = [c.data.metrics for c in children if c.data.tags[schema.PROGRAM_REUSED] == "no"]
    assert firsts
    for metrics in firsts:
        assert metrics[schema.PROGRAM_EXECUTABLE_READ_S] > 0 and metrics[schema.PROGRAM_TRACE_S] == 0


def test_a_search_whose_programs_cannot_be_handed_to_a_process_compiles_them_in_its_trials(monkeypatch):
    import pickle

    from gridbench.gridsearch import precompile
    from gridbench.gridsearch.ray_session import RaySession

    def unpicklable(*args, **kwargs):
        raise pickle.PicklingError("a user's model defined in a file pickle cannot name")

    monkeypatch.setattr(precompile.Precompiler, "start", unpicklable)
    session = RaySession()
    session.precompile(_plan(backend="jax", train_loop="compiled", compile_ahead="on"))
    directory = session.directory.path
    assert session.precompiler is None
    session.stop()
    assert not os.path.exists(directory)


def _ready_context(tmp_path, **options):
    plan = _plan(backend="jax", train_loop="compiled", compile_ahead="on", compile_cache="persistent", **options)
    return plan, replace(trial_context(plan, str(tmp_path)), compile_cache_dir=str(tmp_path / "cache"))


def test_a_program_is_ready_under_a_name_of_what_it_depends_on(tmp_path):
    plan, context = _ready_context(tmp_path)
    names = [ready_name(context, i) for i in range(2)]
    assert names[0] != names[1] and names == [ready_name(context, i) for i in range(2)]  # per program, stable
    assert ready_name(replace(context, cpus=7), 0) == names[0]  # the threads a process compiles with: not the program
    assert ready_name(replace(context, device="gpu"), 0) != names[0]
    # What the executables depend on: the program's hyperparameters, not the epochs, the learning rate or a GPU's share.
    assert ready_name(replace(context, params={**context.params, "epochs": 300, "learning_rate": 0.5}), 0) == names[0]
    assert ready_name(replace(context, gpus_per_trial=0.25), 0) == ready_name(replace(context, gpus_per_trial=1), 0)
    assert ready_name(replace(context, gpus_per_trial=2), 0) != ready_name(replace(context, gpus_per_trial=1), 0)
    assert ready_name(replace(context, params={**context.params, "hidden_layers": 3}), 0) != names[0]
    assert ready_name(replace(context, compile_cache_dir=None), 0) is None
    assert not all_ready(context, 2)
    mark_ready(context, 0)
    assert not all_ready(context, 2)  # one of two
    mark_ready(context, 1)
    assert all_ready(context, 2) and not all_ready(context, 0)


def test_a_search_whose_programs_are_all_ready_starts_no_compiling_process(monkeypatch, tmp_path):
    from gridbench.gridsearch import ray_session, search_runner

    monkeypatch.setenv("GRIDBENCH_CACHE_DIR", str(tmp_path / "cache"))
    plan, context = _ready_context(tmp_path)
    for index in range(2):
        mark_ready(context, index)
    started = []
    monkeypatch.setattr(Precompiler, "start", lambda *args: started.append(args))
    session = ray_session.RaySession()
    session.precompile(plan)
    # The trials' context as the search builds it: nothing compiles the programs ahead, so a GPU worker's first
    # trial queues the others (gridbench.trial.steps.compile_others_ahead), which it then loads from the cache.
    tags = {name: "x" for name in (schema.DEVICE, schema.BACKEND, schema.COMPILE_CACHE, schema.DATA_SYNTHETIC)}
    tags[schema.EXECUTION] = "trials"
    trials_context, _ = search_runner._trials_context(plan, session, None, tags, None, None)
    session.stop()
    assert started == [] and session.precompiler is None and session.programs_ready == 2
    assert not session.compiling_ahead and not trials_context.precompiled


@pytest.mark.gpu
@pytest.mark.slow
def test_on_a_gpu_the_trials_load_the_programs_compiled_while_ray_started(tmp_path):
    store = new_store(tmp_path)
    # A cache of its own: what other tests' searches left in the shared one would not be compiled again.
    result = gridbench(
        "search", "digits", "--device", "gpu", "--backend", "jax", "--gpus", "1", "--set", "epochs=2",
        "--grid", "hidden_units=16,32", "--grid", "learning_rate=0.1,0.01", "--compile-cache", "search",
        "--tracking-uri", store,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    _, (parent,), children = runs_of(store, "digits")
    assert parent.data.metrics[schema.PROGRAMS_PRECOMPILED] == 2
    assert parent.data.metrics[schema.PRECOMPILE_WAIT_S] == 0  # on a GPU the trials never wait to start
    for child in children:
        tags = child.data.tags
        assert tags[schema.DEVICE_ACTUAL] == "gpu:0" and tags["train_loop"] == "compiled"
        assert tags[schema.PROGRAM_CACHED] == "yes" and child.data.metrics[schema.PROGRAMS_AHEAD] == 0
    assert_read_saved_executables(children)


def _gpu_events(monkeypatch, options: SearchOptions) -> list[tuple]:
    """What plan_search hands its two callbacks for a search of digits, on a machine faked to have one GPU:
    ("assumed", backend, backends asked so far) before asking, then ("planned", backend)."""
    from gridbench import environment
    from gridbench.gridsearch import backends

    monkeypatch.setattr(environment, "visible_gpu_count", lambda: 1)
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    spec = load_spec("digits")
    events: list[tuple] = []
    probes = backends.probe  # the test's fake: the backends asked so far are in its `asked`
    asked_before = len(probes.asked)
    plan_search(
        spec,
        options,
        None,
        lambda plan: events.append(("planned", plan.backend)),
        lambda plan: events.append(("assumed", plan.backend, len(probes.asked) - asked_before)),
    )
    return events


def test_a_gpu_search_starts_on_the_backend_its_answer_most_likely_names_before_asking(monkeypatch, fake_probes):
    # No backend named: the first installed of jax, torch, tensorflow, before any is asked; JAX sees the GPU.
    assert _gpu_events(monkeypatch, SearchOptions(device="gpu")) == [("assumed", "jax", 0), ("planned", "jax")]
    # A backend named is assumed, and still asked.
    fake_probes.seeing = {"jax", "torch"}
    assert _gpu_events(monkeypatch, SearchOptions(device="gpu", backend="torch")) == [
        ("assumed", "torch", 0),
        ("planned", "torch"),
    ]
    assert fake_probes.asked[-1] == "torch"
    # The answer differs (JAX sees no GPU here, PyTorch does): the planned search is PyTorch's.
    fake_probes.seeing = {"torch"}
    assert _gpu_events(monkeypatch, SearchOptions(device="gpu")) == [("assumed", "jax", 0), ("planned", "torch")]
    # Nothing to ask, nothing assumed: a CPU search, or a backend chosen already (as `scale` hands its later counts).
    assert _gpu_events(monkeypatch, SearchOptions(device="cpu")) == [("planned", "tensorflow")]
    chosen = backends.BackendChoice("torch", "chosen before")
    assert _gpu_events(monkeypatch, SearchOptions(device="gpu", backend_choice=chosen)) == [("planned", "torch")]


class _FakePrecompiler:
    def __init__(self, context):
        self.context, self.stopped, self.pids = context, False, []

    def stop(self):
        self.stopped = True


def test_compiling_on_an_assumed_plan_goes_on_where_the_answer_confirms_it_and_ends_otherwise(monkeypatch, tmp_path):
    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.setenv("GRIDBENCH_CACHE_DIR", str(tmp_path / "cache"))  # no program ready from other tests
    started = []
    monkeypatch.setattr(
        Precompiler, "start", lambda plan, context, *rest: started.append(_FakePrecompiler(context)) or started[-1]
    )
    assumed = _plan(backend="jax", train_loop="compiled", compile_ahead="on")
    session = RaySession()
    session.assumed(assumed)
    session.planned(_plan(backend="jax", train_loop="compiled", compile_ahead="on"))  # the same programs
    assert len(started) == 1 and not started[0].stopped
    # Confirmed otherwise (here: other threads per trial, so other compiling processes' contexts): ended, replaced.
    session.planned(_plan(backend="jax", train_loop="compiled", compile_ahead="on", cpus_per_trial=2))
    assert len(started) == 2 and started[0].stopped and started[1].context.cpus == 2
    # A plan with nothing to compile ahead ends what an assumed one started.
    session.planned(_plan(backend="tensorflow", compile_ahead="on"))
    assert started[1].stopped and session.precompiler is None
    session.stop()


@pytest.mark.slow
def test_a_compiling_process_for_a_gpu_that_jax_cannot_see_compiles_nothing_and_marks_nothing_ready(tmp_path):
    import pickle

    plan, context = _ready_context(tmp_path)
    context = replace(context, device="gpu", gpus_per_trial=1.0)  # this machine's JAX has no GPU: it would fall back
    job, results = tmp_path / "job.pickle", tmp_path / "programs-0.jsonl"
    job.write_bytes(pickle.dumps((context, [0, 1])))
    done = subprocess.run(
        [sys.executable, "-m", "gridbench.trial.precompile", str(job), str(results)],
        capture_output=True,
        text=True,
        # The first GPU, as the driver hands it one (precompile._environment), to a JAX kept from any GPU.
        env={**os.environ, "CUDA_VISIBLE_DEVICES": "0", "JAX_PLATFORMS": "cpu"},
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    programs = [line for line in lines if "index" in line]
    assert [line["index"] for line in programs] == [0, 1]
    assert all("not a GPU" in line["error"] for line in programs)
    assert not (tmp_path / "cache" / READY_DIR).exists()


def test_an_assumed_plan_found_ready_is_not_counted_for_a_confirmed_plan_with_other_programs(monkeypatch, tmp_path):
    from gridbench.gridsearch.ray_session import RaySession

    monkeypatch.setenv("GRIDBENCH_CACHE_DIR", str(tmp_path / "cache"))
    plan, context = _ready_context(tmp_path)
    for index in range(2):
        mark_ready(context, index)
    session = RaySession()
    session.assumed(plan)
    assert session.programs_ready == 2 and session.precompiler is None
    session.planned(_plan(backend="tensorflow", compile_ahead="on"))  # Keras fit: nothing compiled ahead, none ready
    session.stop()
    assert session.programs_ready == 0
