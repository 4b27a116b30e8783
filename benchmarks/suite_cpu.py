"""Where a command's CPU time goes on the whole machine, by kind of process: for the test suite's budget.

Runs a command (e.g. the suite's pytest line) while this process reads the CPU time of every process on the
machine from /proc every 0.25 s (psutil only names each process, once). Ray daemonises some of its processes, so they are not the command's children;
reading all of them and subtracting what each had used before the start counts them. A process's last reading
stands for its whole life: one that ends between two readings loses at most 0.25 s, and one that lives less
than that is missed. The reader's own CPU time is shown on a line of its own.

Usage: python benchmarks/suite_cpu.py OUT.json -- pytest -n 2 --dist loadfile
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import defaultdict

import psutil

INTERVAL_S = 0.25
RAY_HELPERS = ("dashboard.py", "agent_main.py", "agent.py", "monitor.py", "log_monitor.py", "runtime_env")


def kind(command: list[str], name: str) -> str:
    """A short name for a process, from its command line."""
    text = " ".join(command)
    if not command:
        return name
    if command[0].startswith("ray::") and command[0].endswith("Agent"):  # ray::DashboardAgent, ::RuntimeEnvAgent
        return "ray's python helpers: " + command[0][len("ray::") :]
    if command[0].startswith("ray::") or "default_worker.py" in text:
        return "ray worker (trials)"  # its title changes from ray::IDLE to the actor's
    if name in ("raylet", "gcs_server"):
        return name
    if any(helper in text for helper in RAY_HELPERS) and "ray" in text:
        script = next((part for part in command[1:] if part.endswith(".py")), "?").rsplit("/", 2)[-2:]
        return "ray's python helpers: " + "/".join(script)
    if "gridbench" in command:  # python -m gridbench VERB ...
        verb = next((word for word in command[command.index("gridbench") + 1 :] if not word.startswith("-")), "?")
        return f"gridbench {verb}"
    if "mlflow" in text and ("server" in text or "uvicorn" in text or "gunicorn" in text or "huey" in text):
        return "mlflow server"
    if "chrom" in name:
        return "chromium"
    if "-c" in command[1:3] and "sys.stdin.readline" in text:  # execnet's bootstrap: an xdist worker
        return "pytest worker (the tests themselves, their in-process searches)"
    if any(part.rsplit("/", 1)[-1] == "pytest" for part in command[:3]) or "pytest" in command[1:3]:
        return "pytest (the main process)"
    if command[0].endswith("nice") or "-c" in command[1:3]:  # tests' paths (/tmp/pytest-of-...) may be in it
        return "python -c (tests' own trainings and probes)"
    if "ray" in text and "start" in text:
        return "ray start (clusters)"
    if "-m" in command[1:-1]:  # python -m gridbench.trial.precompile, ...
        return "python -m " + command[command.index("-m") + 1]
    script = next((part for part in command[1:] if part.endswith(".py")), None)
    return f"python {script.rsplit('/', 1)[-1]}" if script else name


TICKS = os.sysconf("SC_CLK_TCK")
MY_PID = os.getpid()


def cpu_seconds(pid: str) -> float | None:
    """User and system time of one process, read from /proc: psutil's reading of every process 4 times a second
    cost 6% of the machine."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            fields = file.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime and stime, fields 14 and 15 of proc(5)


def read(readings: dict[int, tuple[str, float]], before: dict[int, float]) -> None:
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == MY_PID:  # the reader is counted once, below
            continue
        used = cpu_seconds(entry)
        if used is None:
            continue
        pid = int(entry)
        label = readings[pid][0] if pid in readings else None
        if label is None:
            try:
                process = psutil.Process(pid)
                label = kind(process.cmdline(), process.name())
            except psutil.Error:
                continue
        readings[pid] = (label, used - before.get(pid, 0.0))


def main() -> None:
    out, command = sys.argv[1], sys.argv[sys.argv.index("--") + 1 :]
    before = {int(pid): cpu_seconds(pid) or 0.0 for pid in os.listdir("/proc") if pid.isdigit()}
    readings: dict[int, tuple[str, float]] = {}
    start = time.perf_counter()
    child = subprocess.Popen(command)
    while child.poll() is None:
        read(readings, before)
        time.sleep(INTERVAL_S)
    read(readings, before)
    wall = time.perf_counter() - start
    by_kind: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for label, used in readings.values():
        if used > 0:
            by_kind[label] += used
            count[label] += 1
    me = psutil.Process().cpu_times()
    by_kind["this reader"] = me.user + me.system
    total = sum(by_kind.values())
    rows = sorted(by_kind.items(), key=lambda item: -item[1])
    for label, used in rows:
        print(f"{used:9.1f} s {100 * used / total:5.1f}%  {count.get(label, 1):5d}  {label}")
    print(f"{total:9.1f} CPU s in {wall:.1f} s of wall time (exit {child.returncode})")
    with open(out, "w") as file:
        json.dump({"wall_s": wall, "cpu_s": dict(rows), "processes": dict(count), "exit": child.returncode}, file)
    sys.exit(child.returncode)


if __name__ == "__main__":
    main()
