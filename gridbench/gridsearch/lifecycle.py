"""How a search ends, whatever ends it: stop signals, the processes Ray started, the search's directories.

SIGINT and SIGTERM are one thing to a search: the first raises SearchInterrupted in the
main thread (ray.init replaces SIGTERM's handler with sys.exit, which crashed Ray's C++
side with exit 134), and the search records what it had before it exits 128 + the
signal. A disk that fills mid-search stops it the same way (SearchOutOfSpace, exit 3).
Ray's processes are found by this process's tree, never by name (other Ray
jobs on the machine are not ours), and ended by PID once Ray has shut down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Mapping

from gridbench.gridsearch.watchdog import ENDING_FILE

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


EXIT_OUT_OF_SPACE = 3  # a search stopped because a disk filled: what finished is kept, `--resume` goes on


class SearchStopped(KeyboardInterrupt):
    """Something outside the search stopped it: the search records what it had, then exits with `exit_code`.

    A KeyboardInterrupt, so that Ray Tune (which wraps every Exception raised in its loop
    and its callbacks) lets it through to run_search.
    """

    hint = ""  # what was recorded, and how to continue (set by the search as it ends)

    @property
    def ended_by(self) -> str:
        """What a KILLED trial's `ended_by` tag and error say stopped it."""
        raise NotImplementedError

    @property
    def exit_code(self) -> int:
        raise NotImplementedError

    def report(self) -> str:
        raise NotImplementedError


class SearchInterrupted(SearchStopped):
    """SIGINT or SIGTERM stopped the search."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        self.hint = ""
        super().__init__(self.signal_name)

    def report(self) -> str:
        return f"stopped by {self.signal_name}" + (f"; {self.hint}" if self.hint else "")

    @property
    def ended_by(self) -> str:
        return self.signal_name

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # what a shell reports for a process a signal ended: 130, 143


class SearchOutOfSpace(SearchStopped):
    """A disk filled during the search (the journal's, the store's, Ray's): handled as SIGTERM is, exit 3."""

    def __init__(self, fault: BaseException):
        self.fault = fault  # gridbench.disk_space.OutOfSpace, or the OSError that said so
        self.hint = ""
        super().__init__(str(fault))

    def report(self) -> str:
        return f"stopped: {self.fault}" + (f"; {self.hint}" if self.hint else "")

    @property
    def ended_by(self) -> str:
        return "out of space"

    @property
    def exit_code(self) -> int:
        return EXIT_OUT_OF_SPACE


class StopSignals:
    """While installed, the first SIGINT or SIGTERM raises SearchInterrupted; later ones are noted, not raised,
    so that the search can record what it had. `check` raises for a signal something else swallowed."""

    def __init__(self):
        self.received: int | None = None
        self._saved: dict[int, object] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals reach the main thread only (a test running a search in a thread)
        for signum in STOP_SIGNALS:
            self._saved.setdefault(signum, signal.getsignal(signum))
            signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        self._saved.clear()

    def check(self) -> None:
        """Raises SearchInterrupted if a signal came (a Ctrl-C during ray.init was once swallowed there)."""
        if self.received is not None:
            raise SearchInterrupted(self.received)

    def _handle(self, signum, frame) -> None:
        if self.received is None:
            self.received = signum
            raise SearchInterrupted(signum)


class SearchDirectory:
    """The search's temporary directory: Ray's session (its logs, sockets) and Tune's storage live under it.

    Removed when the search ends unless `keep` (--keep-ray-logs).
    """

    # Ray's sockets sit at <ray_dir>/session_<date>_<time>_<pid>/sockets/plasma_store, and a Unix socket's
    # path is limited to 107 bytes: a longer $TMPDIR gives way to /tmp.
    MAX_PATH = 40

    def __init__(self, keep: bool = False):
        self.path = Path(tempfile.mkdtemp(prefix="gridbench-", dir=self.parent()))
        self.keep = keep

    @classmethod
    def parent(cls) -> str:
        """Where search directories are made: $TMPDIR (tempfile's choice), or /tmp where that path is too long."""
        parent = tempfile.gettempdir()
        if len(os.path.join(parent, "gridbench-xxxxxxxx", "ray")) > cls.MAX_PATH:
            parent = "/tmp"
        return parent

    @property
    def ray_dir(self) -> str:
        return str(self.path / "ray")

    @property
    def tune_dir(self) -> str:
        return str(self.path / "tune")

    @property
    def messages_log(self) -> str:
        """Ray's own messages to the driver (gridbench.gridsearch.ray_session.ray_messages_to)."""
        return str(self.path / "ray-messages.log")

    def remove(self) -> None:
        if not self.keep:
            shutil.rmtree(self.path, ignore_errors=True)


class OwnProcesses:
    """The processes this search started (Ray's head, raylet, agents, workers), by this process's tree.

    `note` records the tree's processes (pid and start time: a reused pid is not ours); `end` ends those
    still alive once Ray has shut down, by PID. Processes that were already children before (`__init__`)
    are left alone.
    """

    def __init__(self):
        import psutil

        self._psutil = psutil
        self._me = psutil.Process()
        self._before = {p.pid for p in self._children()}
        self.seen: dict[int, float] = {}

    def _children(self):
        try:
            return self._me.children(recursive=True)
        except self._psutil.Error:
            return []

    def adopt(self, pids) -> None:
        """Counts these children among the search's although they started before (the compilations ahead)."""
        for pid in pids:
            try:
                self.seen[pid] = self._psutil.Process(pid).create_time()
            except self._psutil.Error:
                pass

    def note(self) -> None:
        for process in self._children():
            if process.pid in self._before or process.pid in self.seen:
                continue
            try:
                self.seen[process.pid] = process.create_time()
            except self._psutil.Error:
                pass

    def alive(self) -> list:
        """The noted processes still running (zombies excepted)."""
        alive = []
        for pid, started in self.seen.items():
            try:
                process = self._psutil.Process(pid)
                if process.create_time() == started and process.status() != self._psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except self._psutil.Error:
                pass
        return alive

    def matching(self, fragment: str) -> dict[int, float]:
        """The noted processes still alive whose command line holds `fragment`: pid -> start time."""
        found = {}
        for process in self.alive():
            try:
                if any(fragment in part for part in process.cmdline()):
                    found[process.pid] = self.seen[process.pid]
            except self._psutil.Error:
                pass
        return found

    def kill_matching(self, *fragments: str) -> int:
        """Kills at once (SIGKILL) the noted processes still alive whose command line holds any of `fragments`."""
        return len(self._kill_matching(fragments))

    def end(self, grace_s: float = 3.0, at_once: tuple[str, ...] = ()) -> int:
        """Ends every noted process still alive: SIGKILL for those whose command line holds any of `at_once`,
        SIGTERM for the rest, then SIGKILL after `grace_s`. Returns how many."""
        killed = {process.pid for process in self._kill_matching(at_once)} if at_once else set()
        leftovers = [process for process in self.alive() if process.pid not in killed]
        for process in leftovers:
            try:
                process.terminate()
            except self._psutil.Error:
                pass
        still = self._wait_exited(leftovers, timeout_s=grace_s)
        for process in still:
            try:
                process.kill()
            except self._psutil.Error:
                pass
        self._wait_exited(still, timeout_s=grace_s)
        return len(killed) + len(leftovers)

    def _kill_matching(self, fragments) -> list:
        matching = []
        for process in self.alive():
            try:
                if any(fragment in part for part in process.cmdline() for fragment in fragments):
                    process.kill()
                    matching.append(process)
            except self._psutil.Error:
                pass
        self._wait_exited(matching, timeout_s=1.0)
        return matching

    def _wait_exited(self, processes: list, timeout_s: float) -> list:
        """Waits until each of `processes` has exited; returns those still running after `timeout_s`.

        A process that has exited is a zombie until its parent reaps it, and holds nothing but its pid. A Ray worker
        left after Ray's shutdown is an orphan, whose reaping is init's: on the 2-core machine init reaped killed
        orphans 1.6-1.8 s late, and psutil's wait_procs, which waits for the pid to be gone, waited its whole
        second's timeout for a killed worker (docs/results/around-training.md, twenty-eighth).
        """
        deadline = time.monotonic() + timeout_s
        running = list(processes)
        while running:
            self._psutil.wait_procs(running, timeout=0)  # reaps this process's own children
            running = [process for process in running if self._running(process)]
            if not running or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        return running

    def _running(self, process) -> bool:
        """Whether `process` has not exited yet: gone, reused by another process, or a zombie, it has."""
        try:
            return process.is_running() and process.status() != self._psutil.STATUS_ZOMBIE
        except self._psutil.NoSuchProcess:
            return False
        except self._psutil.Error:  # not ours to read: still there, so still to wait for
            return True


class Watchdog:
    """A process of its own that cleans up after a driver killed outright (gridbench/gridsearch/watchdog.py).

    Started before Ray, in a session of its own (a signal to the driver's process group
    does not reach it), with the search's directory; `guard` hands it the processes Ray
    started, by PID and start time, through its stdin. If the driver dies without `leave`,
    the pipe closes and the watchdog ends them and removes the directory (unless kept).
    A script of the standard library and psutil, which reads the process tree for both.
    """

    SCRIPT = Path(__file__).with_name("watchdog.py")

    def __init__(self, directory: SearchDirectory):
        self._process = subprocess.Popen(
            [
                sys.executable,
                str(self.SCRIPT),
                str(directory.path),
                "keep" if directory.keep else "remove",
                str(os.getpid()),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=None,  # the driver's: where the end of a search whose node died is said (node_death)
            start_new_session=True,
            text=True,
            # A copy of the environment, not the live one: another thread (the backends' probe) may change a
            # variable while the child starts, and the C array handed over is then freed under it (EFAULT).
            env=dict(os.environ),
        )
        self._sent: set[int] = set()
        self._directory = directory.path

    @property
    def pid(self) -> int:
        return self._process.pid

    def guard(self, processes: Mapping[int, float]) -> None:
        """Hands the watchdog the processes (pid: psutil create_time) it has not been told of yet."""
        new = {pid: started for pid, started in processes.items() if pid not in self._sent}
        self._write("".join(f"{pid} {started!r}\n" for pid, started in new.items()))
        self._sent |= set(new)

    def guard_raylet(self, pid: int, started: float) -> None:
        """The search's raylet: ending as the driver dies, it means Ray's node died (and Ray ended the driver)."""
        self._write(f"raylet {pid} {started!r}\n")

    def describe_search(self, search: Mapping[str, str]) -> None:
        """What gridbench.gridsearch.node_death needs to end the search if its node dies (one JSON line)."""
        self._write(f"search {json.dumps(dict(search))}\n")

    def ending(self) -> None:
        """The driver shuts Ray down itself now: the raylet's end that follows is not its node's death."""
        try:
            (self._directory / ENDING_FILE).touch()  # there before the raylet ends, read or not (watchdog.py)
        except OSError:
            pass
        self._write("ending\n")

    def leave(self, timeout_s: float = 5.0) -> None:
        """The driver cleaned up itself: the watchdog exits, touching nothing."""
        self._write("leave\n")
        try:
            self._process.stdin.close()
        except OSError:
            pass
        try:
            self._process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def _write(self, text: str) -> None:
        if not text:
            return
        try:
            self._process.stdin.write(text)
            self._process.stdin.flush()
        except (OSError, ValueError):  # it is gone (or its pipe closed): nothing to hand it
            pass


def local_ray_environment() -> None:
    """Before Ray is imported: a local Ray binds its servers to 127.0.0.1, not every interface.

    ray.init(_node_ip_address="127.0.0.1") is turned back into the machine's address by Ray
    (services.resolve_ip_for_localhost); Ray takes loopback only where it believes clusters are
    off (ray_constants.ENABLE_RAY_CLUSTER, read at import, and by every process Ray starts).
    Checked with psutil: GCS, raylet, agents and workers then listen on 127.0.0.1 alone.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
