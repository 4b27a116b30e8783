"""Ends what a search started once its driver has been killed outright (SIGKILL): run as a script, stdlib and psutil.

A driver killed by SIGKILL cannot clean up, and Ray's processes (GCS, raylet, agents,
workers) and the search's directory outlived it. The driver starts this script in a
session of its own (gridbench.gridsearch.lifecycle.Watchdog), so that a signal to the
driver's process group does not reach it, and writes to its stdin, one line each:

    PID START_TIME    a process to end if the driver dies (START_TIME as psutil's create_time)
    leave             the driver ended cleanly: exit, touching nothing

End of input without `leave` means the driver is gone (the kernel closes its end of
the pipe however it died). The watchdog then ends each noted process still running
with the same start time (a reused pid is not ours), with every descendant of theirs
(workers that a raylet started after the list was sent): SIGTERM, then SIGKILL after
a grace period. Never by name. Then it removes the search's directory unless told to keep it. The process
tree is psutil's reading, as the driver's own (gridbench.gridsearch.lifecycle.OwnProcesses).

    python watchdog.py DIRECTORY keep|remove
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time

import psutil

GRACE_S = 3.0


def _process(pid: int, started: float):
    """The running process `pid` if it is the one noted (the same start time: a reused pid is not ours), else None."""
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started) < 0.05 and process.status() != psutil.STATUS_ZOMBIE:
            return process
    except psutil.Error:
        pass
    return None


def _alive(pid: int, started: float) -> bool:
    return _process(pid, started) is not None


def _with_descendants(roots: dict[int, float]) -> dict[int, float]:
    """The noted processes still running, and every process below them (psutil reads the tree)."""
    found = {}
    for pid, started in roots.items():
        process = _process(pid, started)
        if process is None:
            continue
        found[pid] = started
        try:
            below = process.children(recursive=True)
        except psutil.Error:
            continue
        for child in below:
            try:
                found.setdefault(child.pid, child.create_time())
            except psutil.Error:
                pass
    return found


def end(processes: dict[int, float], grace_s: float = GRACE_S) -> None:
    """SIGTERM to each, SIGKILL to those still running after `grace_s`; by PID and start time only."""
    targets = _with_descendants(processes)
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, grace_s)):
        for pid, started in targets.items():
            if _alive(pid, started):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(_alive(p, s) for p, s in targets.items()):
            time.sleep(0.05)


def main(argv: list[str]) -> int:
    directory, keep = argv[1], argv[2] == "keep"
    noted: dict[int, float] = {}
    for line in sys.stdin:  # until the driver says `leave`, or dies (end of input)
        words = line.split()
        if words == ["leave"]:
            return 0
        if len(words) == 2:
            noted[int(words[0])] = float(words[1])
    end(noted)
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the search is the driver's to handle
    sys.exit(main(sys.argv))
