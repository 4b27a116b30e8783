"""A clock for a module's waits: its sleeps pass at once and are counted, so that a test asserts how long the code
would have waited (its backoffs, its grace) whatever the shared runner's load, and never holds a wall-clock bound."""

from __future__ import annotations

import time


class VirtualClock:
    """Stands in for a module's `time`: `sleep` adds to `slept` instead of sleeping; `monotonic` runs that far ahead.

    A wait that never ends (a retry loop that ignores its grace) raises after `limit_s` virtual seconds, in the
    thread that waits, so that the test fails on what the clock says instead of hanging.
    """

    def __init__(self, limit_s: float = 3600.0):
        self.slept = 0.0
        self.limit_s = limit_s

    def monotonic(self) -> float:
        return time.monotonic() + self.slept

    def perf_counter(self) -> float:
        return time.perf_counter()

    def time(self) -> float:
        return time.time() + self.slept

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        if self.slept > self.limit_s:
            raise RuntimeError(f"waited {self.slept:.0f} s (virtual): a wait that does not end")
        time.sleep(0.001)  # lets the other threads run, as a real wait would
