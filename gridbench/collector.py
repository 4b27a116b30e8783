"""A process's start-up without Python's cyclic garbage collector, and what it imported frozen out of it.

Importing MLflow, Ray and Ray Tune (the driver) or TensorFlow and Keras (a trial's worker) allocates
hundreds of thousands of objects that live as long as the process, and little garbage. The
collector still ran over them hundreds of times while they were imported, and each later full
collection walked them all again (docs/results/suite-time-2core/search-start-cpu.txt). So a process
that is gridbench's own pauses the collector while it starts: the command line (gridbench.cli.run)
until its search's first trial has started in its worker (the collection then runs while the driver
waits for that trial, not before Tune's start: gridbench.gridsearch.tune_callback), and a trial's
worker (Ray's process, running Tune's trainable) until its framework is imported. Then the start-up's
garbage is collected once (a cycle holding a database connection is closed, not kept), what survived
is frozen (gc.freeze: no later collection walks it; reference counting still frees it) and the collector
is on again.

Once per process: a worker's later trials leave the collector as it is, since freezing a trial's
objects would keep any cycle among them for the process's life. A search run through the API, in a
user's process or a test's, finds the collector untouched: `resume_after_startup` does nothing
unless `pause_for_startup` paused it.

`held` keeps the collector off over one short step timed on its own (a saved program's load), in any
process, and leaves it as it was.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_paused = False
_started = False  # this process's start-up was paused once already
_holds = 0  # blocks inside `held`, in any thread
_held_from_on = False  # the collector was on as the first of them began
_holds_lock = threading.Lock()


def pause_for_startup() -> None:
    """No cyclic collection until `resume_after_startup`: once per process, and only in a process of gridbench's own."""
    global _paused, _started
    if _started or not gc.isenabled():
        return
    _started = _paused = True
    gc.disable()


def resume_after_startup() -> None:
    """Collects the start-up's garbage once, freezes what survived and turns the collector back on (if paused)."""
    global _paused
    if not _paused:
        return
    _paused = False
    gc.collect()
    gc.freeze()
    gc.enable()


@contextlib.contextmanager
def held() -> Iterator[None]:
    """No cyclic collection inside the block, in any thread; the collector as it was once the last such block ends.

    For short steps that allocate many objects and are timed on their own: a saved program's load unpickles its
    executables, and a full collection that fell inside it walked the whole heap. On one H100, 3 of 6 fresh
    processes loaded the MLP's program in 0.181-0.254 s, 0.120-0.164 s of it one such collection, against
    0.065-0.092 s in the others (docs/results/around-training.md, "twenty-third"). The garbage is collected later: a
    collection that fell due meanwhile runs once the hold ends.
    """
    global _holds, _held_from_on
    with _holds_lock:
        if _holds == 0:
            _held_from_on = gc.isenabled()
            gc.disable()
        _holds += 1
    try:
        yield
    finally:
        with _holds_lock:
            _holds -= 1
            if _holds == 0 and _held_from_on:
                gc.enable()
