"""Where one search's CPU time goes, process by process: the driver, Ray's processes and the trials' workers.

Runs a gridbench command in this process while a thread reads the CPU time of every process under
it (psutil) every 0.2 s; a process's last reading stands for its whole life, so a process that ends
between two readings loses at most its last 0.2 s. The driver's own figure is its rusage at the end.
On a 2-core machine the CPU seconds are the budget a test suite of searches spends.

Usage: python benchmarks/search_cpu.py search digits --set epochs=2 --tracking-uri sqlite:///cpu.db
"""

from __future__ import annotations

import resource
import sys
import threading
import time

import psutil

from gridbench.cli import main as gridbench_main


def _kind(process: psutil.Process) -> str:
    """A short name for one of the search's processes, from its title or command line."""
    command = process.cmdline()
    if not command:
        return process.name()
    if command[0].startswith("ray::"):
        return command[0].split()[0]
    script = next((part for part in command[1:] if part.endswith(".py")), None)
    return script.rsplit("/", 2)[-1] if script else command[0].rsplit("/", 1)[-1]


def _watch(readings: dict[int, tuple[str, float]], stop: threading.Event, cost: list[float]) -> None:
    me = psutil.Process()
    while not stop.wait(0.2):
        cost[:] = [time.thread_time()]  # the harness's own CPU, inside the driver's rusage
        for process in me.children(recursive=True):
            try:
                times = process.cpu_times()
                readings[process.pid] = (_kind(process), times.user + times.system)
            except psutil.Error:
                pass


def main() -> None:
    readings: dict[int, tuple[str, float]] = {}
    stop = threading.Event()
    cost = [0.0]
    watcher = threading.Thread(target=_watch, args=(readings, stop, cost), daemon=True)
    start = time.perf_counter()
    watcher.start()
    try:
        status = gridbench_main(sys.argv[1:])
    finally:
        stop.set()
        watcher.join()
    wall = time.perf_counter() - start
    own = resource.getrusage(resource.RUSAGE_SELF)
    driver = own.ru_utime + own.ru_stime
    print(f"\nCPU seconds by process (exit status {status}, {wall:.1f} s of wall time):")
    print(f"{driver:8.2f}  driver (this process, rusage), of which this benchmark's reading thread {cost[0]:.2f}")
    for kind, seconds in sorted(readings.values(), key=lambda row: -row[1]):
        print(f"{seconds:8.2f}  {kind}")
    total = driver + sum(seconds for _, seconds in readings.values())
    print(f"{total:8.2f}  in all: {total / wall:.2f} cores on average")


if __name__ == "__main__":
    main()
