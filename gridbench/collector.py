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
"""

from __future__ import annotations

import gc

_paused = False
_started = False  # this process's start-up was paused once already


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
