"""How late this machine's init reaps an orphan killed with SIGKILL: python3 orphan-reap.py > orphan-reap.txt.

A parent process starts a child and exits at once, so that init (pid 1) becomes the child's parent, as it does for
a Ray worker whose raylet has gone. The child is then killed; the time until it is a zombie (it has exited) and the
time until it is gone (init has reaped it) are printed, three times."""

import subprocess
import sys
import time

import psutil

ORPHAN = "import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']).pid)"

for _ in range(3):
    orphan = psutil.Process(int(subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True).stdout))
    time.sleep(0.2)
    parent = orphan.ppid()
    start = time.perf_counter()
    orphan.kill()
    zombie_after = gone_after = None
    while time.perf_counter() - start < 5:
        try:
            if orphan.status() == psutil.STATUS_ZOMBIE and zombie_after is None:
                zombie_after = time.perf_counter() - start
        except psutil.NoSuchProcess:
            gone_after = time.perf_counter() - start
            break
        time.sleep(0.005)
    print(f"parent pid {parent}: a zombie {zombie_after:.4f} s after the kill, gone {gone_after:.3f} s after it")
