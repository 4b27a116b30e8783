"""The worker's program cache: each program compiled once, by whoever asks first; failures retried."""

from __future__ import annotations

import dataclasses
import multiprocessing
import threading
import time

import pytest

from gridbench.workloads.programs import ProgramCache


def test_a_program_is_compiled_once_and_then_reused():
    cache, calls = ProgramCache(), []
    first = cache.get("a", lambda: calls.append("a") or "program a")
    again = cache.get("a", lambda: calls.append("again") or "other")
    assert (first.program, first.reused) == ("program a", False)
    assert (again.program, again.reused) == ("program a", True) and calls == ["a"]


def test_a_trial_waits_for_a_compilation_started_ahead_and_counts_the_wait():
    cache, release = ProgramCache(), threading.Event()

    def slow():
        release.wait(5)
        return "compiled ahead"

    assert cache.compile_ahead({"a": slow, "b": lambda: "b"}) == 2
    assert cache.compile_ahead({"a": slow}) == 0  # already under way: not started twice
    threading.Timer(0.3, release.set).start()
    lookup = cache.get("a", lambda: pytest.fail("compiled twice"))
    assert lookup.program == "compiled ahead" and lookup.reused and lookup.waited_s >= 0.2


def test_a_failed_compilation_ahead_is_compiled_again_by_the_trial_that_needs_it():
    cache = ProgramCache()

    def broken():
        raise RuntimeError("out of memory")

    cache.compile_ahead({"a": broken})
    while cache.pending():
        time.sleep(0.01)
    lookup = cache.get("a", lambda: "compiled by the trial")
    assert (lookup.program, lookup.reused) == ("compiled by the trial", False)


def test_a_failed_compilation_is_raised_and_not_kept():
    cache = ProgramCache()
    with pytest.raises(RuntimeError):
        cache.get("a", lambda: (_ for _ in ()).throw(RuntimeError("trace failed")))
    assert "a" not in cache and cache.get("a", lambda: "second try").program == "second try"


def _compile_under_lock(lock_dir: str, log: str, name: str) -> None:
    cache = ProgramCache()
    cache.lock_dir = lock_dir

    def compile_program():
        with open(log, "a") as f:
            f.write(f"{name} start {time.monotonic()}\n")
        time.sleep(0.5)
        with open(log, "a") as f:
            f.write(f"{name} end {time.monotonic()}\n")
        return name

    cache.get(("mlp", 128), compile_program)


def test_workers_of_one_search_compile_a_program_one_at_a_time(tmp_path):
    """The file lock named after the key: a second worker waits, then finds it in the persistent cache."""
    log = tmp_path / "log"
    workers = [
        multiprocessing.get_context("spawn").Process(target=_compile_under_lock, args=(str(tmp_path), str(log), n))
        for n in ("w1", "w2")
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    events = [line.split() for line in log.read_text().splitlines()]
    assert [e[1] for e in events] == ["start", "end", "start", "end"]  # never two at once
    assert events[0][0] == events[1][0] and events[2][0] == events[3][0]


def test_a_gpu_worker_queues_the_other_programs_once_per_search_and_never_its_own(monkeypatch):
    from types import SimpleNamespace

    from gridbench.trial import steps
    from gridbench.workloads import programs

    monkeypatch.setattr(programs, "PROGRAMS", ProgramCache())
    monkeypatch.setattr(steps, "_QUEUED_AHEAD", set())

    def session(key):
        return SimpleNamespace(program_key=key, compile_detached=lambda: f"program {key}")

    own, opened = session("a"), []

    def others():
        opened.append(1)
        return [session("a"), session("b"), session("c")]

    gpu = SimpleNamespace(device="gpu", compile_cache_dir="/search-1", precompiled=False)
    assert steps.compile_others_ahead(gpu, own, others) == 2  # b and c; a is the trial's own
    assert steps.compile_others_ahead(gpu, own, others) == 0 and len(opened) == 1  # the next trial: nothing to open
    assert (
        steps.compile_others_ahead(
            SimpleNamespace(device="cpu", compile_cache_dir="/search-2", precompiled=False), own, others
        )
        == 0
    )
    assert programs.PROGRAMS.get("b", lambda: pytest.fail("compiled twice")).program == "program b"
    assert "a" not in programs.PROGRAMS
    # Where the search's own processes compile ahead (gridbench.gridsearch.precompile), workers queue nothing.
    precompiled = SimpleNamespace(device="gpu", compile_cache_dir="/search-3", precompiled=True)
    assert steps.compile_others_ahead(precompiled, own, others) == 0 and len(opened) == 1


def _trial(units: int, reused: str, cached: str):
    from gridbench.tracking import schema
    from gridbench.tracking.records import TrialRecord
    from gridbench.tracking.schema import TrialStatus
    from gridbench.trial.outcome import TrialOutcome

    metrics = {
        schema.TEST_ACCURACY: 0.9,
        schema.STEADY_EPOCH_S: 0.01,
        schema.WARMUP_EPOCH_S: 0.02,
        schema.COMPILE_S: 3.0 if reused == cached == "no" else 0.1,
        schema.TRIAL_WALL_S: 1.0,
    }
    tags = {schema.DEVICE_ACTUAL: "gpu:0", schema.PROGRAM_REUSED: reused, schema.PROGRAM_CACHED: cached}
    outcome = TrialOutcome(TrialStatus.FINISHED, 0.0, 1.0, 0, metrics, tags)
    return TrialRecord.from_outcome(f"t{units}", {"hidden_units": units, "learning_rate": 0.01}, outcome)


def test_the_output_says_which_programs_were_compiled_loaded_from_the_cache_or_reused(monkeypatch, tmp_path):
    from rich.console import Console

    from gridbench.gridsearch import SearchOptions, SearchResult, plan_search
    from gridbench.gridsearch.progress import SearchProgress, print_search
    from gridbench.gridsearch.summary import summarise
    from gridbench.spec import load_spec
    from gridbench.tracking import schema

    monkeypatch.setenv("GRIDBENCH_CACHE_DIR", str(tmp_path / "jax"))
    plan = plan_search(
        load_spec("digits"), SearchOptions(backend="tensorflow", cpus_per_trial=1, compile_cache="persistent")
    )
    trials = (_trial(32, "no", "no"), _trial(64, "no", "yes"), _trial(128, "yes", "no"), _trial(256, "yes", "yes"))
    console = Console(record=True, width=250)
    progress = SearchProgress(console, schema.TEST_ACCURACY)
    progress.start(len(trials))
    for trial in trials:
        progress.trial_ended(trial)
    progress.stop()
    summary = summarise(plan, trials, 1, 4.0, 1.0, 0.0)
    jax = dataclasses.replace(plan, backend_choice=dataclasses.replace(plan.backend_choice, backend="jax"))
    print_search(console, SearchResult(jax, "run", "gridbench/digits", trials, summary))
    text = console.export_text()
    said = [line.split(", wall")[0].split("s, ")[-1] for line in text.splitlines() if line.startswith("done")]
    assert said == [
        "program compiled in 3 s",
        "program loaded from the compile cache in 0.1 s",
        "program reused in 0.1 s",
        "program reused in 0.1 s",  # compiled before it asked: where it came from is that trial's story
    ]
    assert (
        f"Trials' programs: 1 compiled, 1 loaded from the compile cache, 2 reused; JAX's compile cache "
        f"{tmp_path / 'jax'}, kept across searches."
    ) in " ".join(text.split())
    console = Console(record=True, width=200)
    print_search(console, SearchResult(plan, "run", "gridbench/digits", trials, summary))  # a TensorFlow search
    told = console.export_text()
    assert "compile cache /" not in told and "--compile-cache is JAX's" in told  # no JAX cache to tell of
