"""The compile cache kept across searches (the default): its states, a directory that cannot take it, two
searches sharing it, corrupt entries, and the warm-up phase that compiles every program before timed searches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gridbench import compile_cache
from gridbench.gridsearch import SearchOptions, plan_search
from gridbench.spec import load_spec
from gridbench.tracking import read_search, schema


def test_the_cache_is_kept_across_searches_by_default_and_says_what_it_held(tmp_path, monkeypatch):
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    assert SearchOptions().compile_cache == compile_cache.PERSISTENT
    assert compile_cache.state(str(tmp_path / "cache")) == "empty"
    (tmp_path / "cache").mkdir()
    for name in ("jit_a-1-cache", "jit_a-1-atime", "jit_b-2-cache", "jit_b-2-atime"):
        (tmp_path / "cache" / name).write_bytes(b"x" * 500_000)
    assert compile_cache.state(str(tmp_path / "cache")) == "2 entries, 2.0 MB"
    plan = plan_search(load_spec("digits"), SearchOptions(tracking_uri=f"sqlite:///{tmp_path}/m.db"))
    assert plan.options.compile_cache == compile_cache.PERSISTENT
    assert plan.compile_cache_state == "2 entries, 2.0 MB"


def test_its_bound_is_settable(monkeypatch):
    monkeypatch.setenv(compile_cache.MAX_SIZE_ENV, "512")
    assert compile_cache.max_size_bytes() == 512 * 1024**2
    monkeypatch.setenv(compile_cache.MAX_SIZE_ENV, "lots")
    assert compile_cache.max_size_bytes() == compile_cache.DEFAULT_MAX_MB * 1024**2


def test_a_cache_directory_that_cannot_be_written_leaves_the_search_compiling_in_its_own(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the cache's parent should be")
    monkeypatch.setenv(compile_cache.CACHE_DIR_ENV, str(blocker / "jax"))
    plan = plan_search(load_spec("digits"), SearchOptions(tracking_uri=f"sqlite:///{tmp_path}/m.db"))
    assert plan.options.compile_cache == compile_cache.SEARCH
    assert plan.compile_cache_state.startswith(f"cannot write the compile cache {blocker / 'jax'}")
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "compiling in this search's own directory instead" in line and compile_cache.CACHE_DIR_ENV in line


def search(tmp_path: Path, cache: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, compile_cache.CACHE_DIR_ENV: str(cache)}
    command = [sys.executable, "-m", "gridbench", "search", "digits", "--backend", "jax",
               "--set", "train_loop=compiled", "--set", "epochs=2",
               "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", *extra]  # fmt: skip
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def trial_runs(uri: str, run_id: str) -> list:
    from mlflow import MlflowClient

    search_run = read_search(uri, run_id)
    client = MlflowClient(uri)
    return client.search_runs(
        [search_run.experiment_id], filter_string=f"tags.`{schema.PARENT_RUN}` = '{run_id}'", max_results=100
    )


def program_sources(uri: str, run_id: str) -> set[str]:
    return {run.data.tags.get(schema.PROGRAM_CACHED, "?") for run in trial_runs(uri, run_id)}


@pytest.mark.slow
def test_two_searches_share_a_cold_cache_at_once_and_corrupt_entries_are_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    first, second = search(tmp_path, cache), search(tmp_path, cache)
    for process in (first, second):
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, output[-3000:]
    entries = list(cache.glob("*-cache"))
    assert entries
    for entry in entries:  # every program's entry unreadable
        entry.write_bytes(b"not an XLA executable")
    third = search(tmp_path, cache)
    output = third.communicate(timeout=600)[0]
    assert third.returncode == 0, output[-3000:]
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = output.split("parent run ")[1].split()[0]
    assert read_search(uri, run_id).metrics[schema.TRIALS_FINISHED] == 4
    assert read_search(uri, run_id).tags[schema.COMPILE_CACHE_STATE].endswith("MB")  # what it held: not empty
    assert "no" in program_sources(uri, run_id)  # the corrupt programs were compiled, not loaded


@pytest.mark.slow
def test_scale_compiles_every_program_before_its_counts_and_every_count_loads_them(tmp_path):
    env = {**os.environ, compile_cache.CACHE_DIR_ENV: str(tmp_path / "cache")}
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    result = subprocess.run(
        [sys.executable, "-m", "gridbench", "scale", "digits", "--cpus", "1,2", "--backend", "jax",
         "--set", "train_loop=compiled", "--set", "epochs=2", "--tracking-uri", uri, "--format", "json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    (experiment,) = [e for e in client.search_experiments() if e.name.endswith("digits")]
    searches = client.search_runs([experiment.experiment_id], f"tags.`{schema.KIND}` = 'search'",
                                  order_by=["attributes.start_time ASC"])  # fmt: skip
    assert len(searches) == 2
    first, second = (s.data for s in searches)
    assert first.metrics[f"{schema.ACCOUNT_PREFIX}compile_warmup_s"] > 0
    assert second.metrics[f"{schema.ACCOUNT_PREFIX}compile_warmup_s"] == 0
    assert "program(s) compiled" in first.tags[schema.COMPILE_WARMUP]
    for run in searches:  # no count compiled: each loaded every program the warm-up had compiled
        assert program_sources(uri, run.info.run_id) == {"yes"}
        # A trial that got its program itself says where that time went, by JAX's clocks.
        trials = trial_runs(uri, run.info.run_id)
        loaded = [t.data.metrics for t in trials if t.data.tags[schema.PROGRAM_REUSED] == "no"]
        assert loaded
        for m in loaded:
            assert m[schema.PROGRAM_TRACE_S] > 0 and m[schema.PROGRAM_LOWER_S] > 0
            assert 0 < m[schema.PROGRAM_CACHE_READ_S] <= m[schema.PROGRAM_BACKEND_S]
            split = m[schema.PROGRAM_TRACE_S] + m[schema.PROGRAM_LOWER_S] + m[schema.PROGRAM_BACKEND_S]
            assert split <= m[schema.COMPILE_S]
