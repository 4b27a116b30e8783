"""Why a trial's worker died, told in the driver: Ray's error, the worker's own log, the kernel's log.

A worker that dies leaves Ray's ActorDiedError (its pid, Ray's exit detail, which does not know the
signal) and its log in the Ray session (worker-<id>-<job>-<pid>.err: Python's faulthandler and absl
write the fatal signal there). The kernel's log names a process its OOM killer killed, where this
process may read it. gridbench.trial.failure turns what they say into the failure's kind and line.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess

from gridbench.trial import failure

LOG_TAIL_BYTES = 16_384


def worker_pid(ray_error: str) -> int | None:
    found = re.search(r"\bpid: (\d+)", ray_error)
    return int(found.group(1)) if found else None


def worker_log_lines(ray_dir: str | None, pid: int | None, most: int = 60) -> list[str]:
    """The last lines of a local worker's stderr log in the search's Ray session; [] if there is none here."""
    if not ray_dir or pid is None:
        return []
    paths = glob.glob(os.path.join(ray_dir, "session_*", "logs", f"worker-*-{pid}.err"))
    if not paths:
        return []
    try:
        with open(paths[0], "rb") as log:
            log.seek(max(0, os.path.getsize(paths[0]) - LOG_TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-most:]


def killed_by_kernel(pid: int | None) -> bool:
    """Whether the kernel's log says its OOM killer killed this process (False where it cannot be read)."""
    if pid is None:
        return False
    try:
        log = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=2, errors="replace").stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return re.search(rf"Killed process {pid}\b", log) is not None


class DeadWorkers:
    """Tells why a trial's worker died (gridbench.trial.failure.Failure), with the search's Ray session."""

    def __init__(self, ray_dir: str | None):
        self.ray_dir = ray_dir

    def __call__(self, ray_error: str) -> failure.Failure:
        pid = worker_pid(ray_error)
        lines = worker_log_lines(self.ray_dir, pid)
        kernel = not failure.signal_in_log(lines) and killed_by_kernel(pid)
        return failure.of_dead_worker(ray_error, lines, kernel)
