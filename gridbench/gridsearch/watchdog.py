"""Ends what a search started once its driver has been killed outright (SIGKILL): run as a script, stdlib and psutil.

A driver killed by SIGKILL cannot clean up, and Ray's processes (GCS, raylet, agents,
workers) and the search's directory outlived it. The driver starts this script in a
session of its own (gridbench.gridsearch.lifecycle.Watchdog), so that a signal to the
driver's process group does not reach it, and writes to its stdin, one line each:

    PID START_TIME    a process to end if the driver dies (START_TIME as psutil's create_time)
    raylet PID START_TIME   the search's raylet (a local Ray's): its log tells whether Ray's node died
    search JSON       the search, once its parent run exists (gridbench.gridsearch.node_death's argument)
    ending            the driver is shutting Ray down itself (ENDING_FILE made first): its raylet's end from now on
                      is no node's death
    leave             the driver ended cleanly: exit, touching nothing

End of input without `leave` means the driver is gone (the kernel closes its end of
the pipe however it died). The watchdog then ends each noted process still running
with the same start time (a reused pid is not ours), with every descendant of theirs
(workers that a raylet started after the list was sent): SIGTERM, then SIGKILL after
a grace period. Never by name. Then it removes the search's directory unless told to keep it. The process
tree is psutil's reading, as the driver's own (gridbench.gridsearch.lifecycle.OwnProcesses).

A driver that Ray itself ended because the search's node died (its raylet's shutdown was triggered, as when its
agent is killed: the raylet fate-shares with it; the driver's core worker exits when its object store goes, at
once or after trying for a while to recover its lost objects) gets the end a stop would have had. The watchdog
knows it from the raylet's log, which says that its shutdown began, or from the order of the deaths: the raylet
ended while the driver still ran (RayletWatcher, which ends a driver that goes on for long after its raylet).
`python -m gridbench.gridsearch.node_death JSON` then writes
the journal's trials to the store, marks the parent KILLED and prints the one line, on the driver's stderr,
before the directory goes.

    python watchdog.py DIRECTORY keep|remove [DRIVER_PID]
"""

from __future__ import annotations

import glob
import os
import select
import shutil
import signal
import sys
import threading
import time
from typing import Callable

import psutil

GRACE_S = 3.0
# The driver creates this file in the search's directory before it shuts Ray down, then says `ending`: a busy
# machine may leave that line unread in the pipe until after the raylet has ended (1 of 8 runs of the test alone).
ENDING_FILE = "driver-ending"
NODE_DEATH_WAIT_S = 1.0  # how long a raylet may take to show that it is ending after the driver died
# How long a driver whose raylet has ended may go on before the watchdog ends it: Ray's core worker exits by
# itself when its object store goes, but one that tries to recover its lost objects first went on for minutes.
DRIVER_AFTER_RAYLET_S = 10.0
DRIVER_AFTER_RAYLET_ENV = "GRIDBENCH_DRIVER_AFTER_RAYLET_S"  # another grace (the watchdog's tests)


def _process(pid: int, started: float, within_s: float = 0.05):
    """The running process `pid` if it is the one noted (the same start time: a reused pid is not ours), else None."""
    try:
        process = psutil.Process(pid)
        if abs(process.create_time() - started) < within_s and process.status() != psutil.STATUS_ZOMBIE:
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


def _of_search(directory: str) -> dict[int, float]:
    """Running processes given the search's directory in an option (`--temp-dir=DIR/ray`), this one aside.

    Ray gives every process it starts the session's directory that way (`--temp-dir`, `--session-dir`), inside the
    search's own. That finds a worker the raylet started after the driver last noted its processes, once the
    raylet's death has left it to init, below no noted process: one outlived a search in CI, once. A user's
    command that merely names a file there (`tail -f DIR/ray/...`) is not Ray's, and is left alone.
    """
    inside = os.path.join(directory, "")  # DIR/: not another directory whose name begins with DIR's
    found = {}
    for process in psutil.process_iter(["cmdline", "create_time"]):
        command = process.info["cmdline"] or ()
        if process.pid != os.getpid() and any(part.startswith("--") and inside in part for part in command):
            found[process.pid] = process.info["create_time"]
    return found


def end(processes: dict[int, float], directory: str | None = None, grace_s: float = GRACE_S) -> None:
    """SIGTERM to each, SIGKILL to those still running after `grace_s`; by PID and start time only.

    With `directory`, also to Ray's processes given it in an option (_of_search)."""
    targets = {**_with_descendants(processes), **(_of_search(directory) if directory else {})}
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
    driver = int(argv[3]) if len(argv) > 3 else os.getppid()  # read now: the driver may die before a line comes
    noted: dict[int, float] = {}
    raylet, search, watchers, ending = None, None, [], threading.Event()

    def said_ending() -> bool:  # the line may still wait in the pipe while the raylet ends: the file is there first
        return ending.is_set() or os.path.exists(os.path.join(directory, ENDING_FILE))

    for line in sys.stdin:  # until the driver says `leave`, or dies (end of input)
        words = line.split()
        if words == ["leave"]:
            return 0
        if words == ["ending"]:
            ending.set()
        elif words[:1] == ["search"]:
            search = line[len("search") :].strip()
        elif len(words) == 3 and words[0] == "raylet":
            raylet = (int(words[1]), float(words[2]))
            watchers.append(RayletWatcher(raylet, driver, said_ending))
        elif len(words) == 2:
            noted[int(words[0])] = float(words[1])
    # Before the end below ends the raylet too. A raylet that ended before the driver said it ends Ray itself
    # died under it; once it has said so, the raylet's log saying its shutdown began is the driver's doing.
    raylet_first = any(watcher.died_first.is_set() for watcher in watchers)
    node_died = raylet_first or (not said_ending() and _node_died(raylet, directory))
    end(noted, directory)
    if node_died and search:
        _end_search(search)
    elif node_died:
        print(
            "gridbench: stopped: the search's Ray node died before it recorded anything; run it again", file=sys.stderr
        )
    if not keep:
        shutil.rmtree(directory, ignore_errors=True)
    return 0


class RayletWatcher:
    """Whether the search's raylet ended while its driver still ran: then Ray's node died under the driver.

    The raylet's log says so too, as its shutdown begins, but a raylet that dies otherwise, or whose last lines
    a busy machine holds back, says nothing; and the driver's core worker may then live on for a minute or more,
    trying to recover its lost objects. The order tells instead: a driver killed outright dies first, and its
    raylet after it (Ray's fate-sharing). A raylet that ends after the driver said that it ends Ray itself
    (`ending`) is the driver's doing. A driver still running DRIVER_AFTER_RAYLET_S after its raylet died under
    it is killed: the watchdog then ends the search as a stop would.
    """

    POLL_S = 0.25

    def __init__(self, raylet: tuple[int, float], driver_pid: int, said_ending: Callable[[], bool]):
        self.raylet, self.driver_pid, self.said_ending = raylet, driver_pid, said_ending
        self.grace_s = float(os.environ.get(DRIVER_AFTER_RAYLET_ENV, DRIVER_AFTER_RAYLET_S))
        self.died_first = threading.Event()
        threading.Thread(target=self._watch, daemon=True, name="raylet-watcher").start()

    def _watch(self) -> None:
        _wait_for_exit(*self.raylet)
        if self.said_ending() or not _driver_running(self.driver_pid):  # did the driver outlive its raylet?
            return
        self.died_first.set()
        deadline = time.monotonic() + self.grace_s
        while _driver_running(self.driver_pid) and time.monotonic() < deadline:
            time.sleep(self.POLL_S)
        if _driver_running(self.driver_pid):  # its own stop, if it began one, had the grace too
            try:
                os.kill(self.driver_pid, signal.SIGKILL)  # our parent, by its pid; the end of input follows
            except OSError:
                pass


def _wait_for_exit(pid: int, started: float) -> None:
    """Returns once the noted process `pid` has ended (or was never the one noted).

    A pidfd holds that very process from the start; its start time is then checked once, loosely: psutil derives
    a start time from the boot time, which a step or a slew of the wall clock (NTP) moves by a second. So neither
    a reused pid nor the clock can make the raylet look ended.
    """
    try:
        handle = os.pidfd_open(pid)
    except OSError:  # ended already; or no pidfd here (Linux < 5.3): its start time is read at each poll then
        while _alive(pid, started):
            time.sleep(RayletWatcher.POLL_S)
        return
    try:
        if _process(pid, started, within_s=2.0) is not None:
            select.select([handle], [], [])  # readable once the process has exited
    finally:
        os.close(handle)


def _driver_running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE and os.getppid() == pid
    except psutil.Error:
        return False


def _node_died(raylet: tuple[int, float] | None, directory: str, wait_s: float = NODE_DEATH_WAIT_S) -> bool:
    """Whether the search's raylet was ending when the driver died: Ray's node died and Ray ended the driver.

    The driver's core worker exits the moment the raylet's shutdown closes its object store; the raylet's log
    says the shutdown was triggered, and why. Whether the raylet is still alive cannot tell: the processes a
    local Ray starts die with the driver (Ray's fate-sharing, SIGKILL from the kernel), and a driver killed
    outright takes its raylet along without a word in its log. A raylet killed outright (SIGKILL) writes
    nothing either: RayletWatcher tells that one by the order of the deaths, if the driver outlived it.
    """
    if raylet is None:
        return False
    deadline = time.monotonic() + wait_s
    while True:
        if _raylet_shutting_down(directory):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _raylet_shutting_down(directory: str) -> bool:
    for logs in glob.glob(os.path.join(directory, "ray", "session_*", "logs", "raylet.out")):
        try:
            with open(logs, "rb") as log:
                log.seek(max(0, os.path.getsize(logs) - 65536))
                if b"shutdown triggered" in log.read():
                    return True
        except OSError:
            continue
    return False


def _end_search(search: str) -> None:
    """The search's end after its node died (gridbench.gridsearch.node_death), within a bound."""
    import subprocess

    try:
        subprocess.run([sys.executable, "-m", "gridbench.gridsearch.node_death", search], timeout=120, check=False)
    except (OSError, subprocess.SubprocessError):
        pass


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for the search is the driver's to handle
    sys.exit(main(sys.argv))
