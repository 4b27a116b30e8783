"""The compile cache kept across searches (the default): its states, a directory that cannot take it, two
searches sharing it, corrupt entries. The warm-up phase that compiles every program before timed searches is
checked on test_scale.py's real run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from storereads import program_sources
from stores import new_store

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


def search(tmp_path: Path, store: str, cache: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, compile_cache.CACHE_DIR_ENV: str(cache)}
    command = [sys.executable, "-m", "gridbench", "search", "digits", "--backend", "jax",
               "--set", "train_loop=compiled", "--set", "epochs=2",
               "--tracking-uri", store, *extra]  # fmt: skip
    return subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.mark.slow
def test_two_searches_share_a_cold_cache_at_once_and_corrupt_entries_are_compiled_again(tmp_path):
    cache = tmp_path / "cache"
    uri = new_store(tmp_path)
    first, second = search(tmp_path, uri, cache), search(tmp_path, uri, cache)
    for process in (first, second):
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, output[-3000:]
    entries = list(cache.glob("*-cache"))
    saved = list(cache.glob("programs/*.program"))  # gridbench.workloads.saved_programs: one per program
    assert entries and saved
    for entry in entries + saved:  # every program's entry unreadable
        entry.write_bytes(b"not an XLA executable")
    third = search(tmp_path, uri, cache)
    output = third.communicate(timeout=600)[0]
    assert third.returncode == 0, output[-3000:]
    run_id = output.split("parent run ")[1].split()[0]
    assert read_search(uri, run_id).metrics[schema.TRIALS_FINISHED] == 4
    assert read_search(uri, run_id).tags[schema.COMPILE_CACHE_STATE].endswith("MB")  # what it held: not empty
    assert "no" in program_sources(uri, run_id)  # the corrupt programs were compiled, not loaded
    rewritten = list(cache.glob("programs/*.program"))  # and saved again, whole
    assert rewritten and all(path.read_bytes().startswith(b"gridbench-program\n") for path in rewritten)
