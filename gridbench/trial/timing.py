"""Clocks for trials: phases and epochs on a monotonic clock, the device synchronised first.

Device work is asynchronous, so every reading is preceded by `sync()`, which waits
for the work already queued. The first epoch (tracing, compilation, allocation) is
warm-up and is reported apart from the steady-state epochs that follow it.
"""

from __future__ import annotations

import statistics
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from gridbench.tracking import schema


def _no_sync() -> None:
    pass


class PhaseClock:
    """Times named phases of a trial (setup, fit, evaluation) and each training epoch."""

    def __init__(self, sync: Callable[[], None] = _no_sync):
        self.sync = sync
        self.phases: dict[str, float] = {}
        self.epochs: list[float] = []
        self._epoch_start: float | None = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.sync()
        start = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start

    def epoch_begin(self) -> None:
        self.sync()
        self._epoch_start = time.perf_counter()

    def epoch_end(self) -> None:
        self.sync()
        if self._epoch_start is None:
            raise RuntimeError("epoch_end() without epoch_begin()")
        self.epochs.append(time.perf_counter() - self._epoch_start)
        self._epoch_start = None


def epoch_summary(epochs: list[float]) -> dict[str, float]:
    """Warm-up (the first epoch) and steady-state statistics over the rest, in seconds."""
    if len(epochs) < 2:
        raise ValueError(f"need at least 2 epochs to separate warm-up from steady state, got {len(epochs)}")
    steady = epochs[1:]
    return {
        schema.WARMUP_EPOCH_S: epochs[0],
        schema.STEADY_EPOCH_S: statistics.median(steady),
        schema.STEADY_EPOCH_MEAN_S: statistics.fmean(steady),
        schema.STEADY_EPOCH_STD_S: statistics.stdev(steady) if len(steady) > 1 else 0.0,
        schema.STEADY_EPOCH_MIN_S: min(steady),
        schema.STEADY_EPOCH_MAX_S: max(steady),
        schema.STEADY_EPOCHS: float(len(steady)),
    }
