"""Trainings that tests run in a Python process of their own, at the niceness Ray gives its trial workers.

Ray starts each search's workers at niceness 15 (its `worker_niceness`) and keeps its own processes, and the
search's driver, at 0. A training started here at 0 outweighs the other test worker's trials 1024 to 36 (the
kernel's weights for niceness 0 and 15): a one-trial torch search took 62 s beside test_families' in-process
training at niceness 0, 31 s beside it at 15, and about 29 s alone (2 cores, 2026-11-25). At 15, a training
here shares the cores with a trial as one trial with another, and Ray's own processes still answer first.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

RAY_WORKER_NICENESS = 15
PROGRAMS = Path(__file__).resolve().parent / "programs"  # the programs tests run (linted and formatted as code)


def run_python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """`python *args` (e.g. "-c", script) at Ray workers' niceness; keyword arguments go to subprocess.run."""
    return subprocess.run(["nice", "-n", str(RAY_WORKER_NICENESS), sys.executable, *args], **kwargs)
