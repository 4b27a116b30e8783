"""Traced and compiled programs, kept per worker process and shared by the trials it runs.

Ray reuses a search's workers from trial to trial (reuse_actors), so a program a
worker has compiled serves every later trial with the same program key
(gridbench.workloads.program_key: architecture, batch size, precision, loop; not
learning rate, dropout rate, seed or epochs, which are state or arguments). A trial
that finds its program here pays no tracing or compilation; one that does not pays
it in its own `compile_s` (or waits for a compilation started ahead of it).

Programs can be compiled ahead of need, in background threads: XLA compiles on the
host while the device trains an earlier trial.

Across a search's workers, each program is compiled once: with a `lock_dir` (the
search's JAX compilation cache, set by keras_common.prepare) a compilation holds a
file lock named after its key, so that a second worker waits for the first and then
loads the program from the shared persistent cache instead of compiling it again.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Hashable

from gridbench.tracking import schema

# Building a Keras model draws its initial weights' seeds from Python's global random
# state; a model built in a background thread must not interleave with a trial's
# seeded build (keras.utils.set_random_seed, then the build), or that trial's
# initial weights would depend on timing.
BUILD_LOCK = threading.RLock()

# One compilation ahead at a time. Measured on an H200 (docs/results/h100-issue15.md): with the
# seven other programs compiling four at a time beside it, a trial's own took 30 s to be ready,
# against about 4 s alone, and all eight were ready after about 35 s: no sooner than one by one.
AHEAD_THREADS = 1


@dataclass
class Program:
    """What a compiled loop needs to train and score any trial of one program key."""

    train_epoch: Callable  # (state, key, x, y) -> (state, key, mean loss)
    correct: Callable  # (trainable, non_trainable, x, y) -> correct predictions in a chunk
    compile_s: float  # what compiling it took, where and when it was compiled
    ahead: bool  # compiled ahead of need, in the background
    cached: bool = False  # JAX's persistent cache served it: another worker or search compiled it (compile_cache)


@dataclass(frozen=True)
class Lookup:
    """A trial's view of the cache: its program, and what getting it cost this trial."""

    program: Any
    reused: bool  # compiled before this trial asked (by an earlier trial, or ahead of need)
    waited_s: float  # time this trial spent compiling it, or waiting for a compilation under way


class ProgramCache:
    """Programs by key; each compiled once, by whoever asks first (a trial, or a compilation ahead)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._programs: dict[Hashable, Future] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.lock_dir: str | None = None  # where workers of one search agree who compiles what; None: no agreement

    def _compile_once(self, key: Hashable, compile_program: Callable[[], Any]) -> Any:
        """compile_program(), under the search-wide lock for `key` (the persistent cache then serves the others)."""
        if self.lock_dir is None:
            return compile_program()
        from filelock import FileLock

        os.makedirs(self.lock_dir, exist_ok=True)
        name = hashlib.sha256(repr(key).encode()).hexdigest()[:32]
        with FileLock(os.path.join(self.lock_dir, f"program-{name}.lock")):
            return compile_program()

    def get(self, key: Hashable, compile_program: Callable[[], Any]) -> Lookup:
        """The program for `key`, compiled here by `compile_program` if nobody has compiled it yet."""
        with self._lock:
            future = self._programs.get(key)
            mine = future is None
            if mine:
                future = self._programs[key] = Future()
        start = time.perf_counter()
        if mine:
            try:
                future.set_result(self._compile_once(key, compile_program))
            except BaseException as err:
                with self._lock:
                    del self._programs[key]  # a later trial may try again
                future.set_exception(err)
                raise
            return Lookup(future.result(), False, time.perf_counter() - start)
        try:
            program = future.result()  # compiled, or being compiled ahead: wait for it
        except Exception:  # a compilation ahead failed: this trial compiles it, and says why if it fails too
            with self._lock:
                if self._programs.get(key) is future:
                    del self._programs[key]
            return self.get(key, compile_program)
        return Lookup(program, True, time.perf_counter() - start)

    def compile_ahead(self, jobs: dict[Hashable, Callable[[], Any]]) -> int:
        """Starts compiling every program of `jobs` not yet here, in background threads; returns how many."""
        started = 0
        with self._lock:
            for key, compile_program in jobs.items():
                if key in self._programs:
                    continue
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(AHEAD_THREADS, thread_name_prefix="gridbench-compile")
                self._programs[key] = self._pool.submit(self._compile_once, key, compile_program)
                started += 1
        return started

    def pending(self) -> int:
        """Compilations still under way."""
        with self._lock:
            return sum(not f.done() for f in self._programs.values())

    def __contains__(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._programs

    def clear(self) -> None:
        with self._lock:
            self._programs.clear()


# One per worker process: Ray runs one trial at a time in each.
PROGRAMS = ProgramCache()


def program_tags(lookup: Lookup) -> dict[str, str]:
    """What a trial records of its program: compiled before it asked here, and served by the persistent cache."""
    return {
        schema.PROGRAM_REUSED: "yes" if lookup.reused else "no",
        schema.PROGRAM_CACHED: "yes" if lookup.program.cached else "no",
    }
