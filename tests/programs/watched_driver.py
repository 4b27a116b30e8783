"""`python watched_driver.py JOURNAL TRACKING_URI`: a driver as a search's, for the watchdog's tests: it starts
the watchdog (gridbench.gridsearch.lifecycle.Watchdog) and a stand-in raylet (`sleep`), hands both over with the
search's description, prints the raylet's pid and then waits, as a driver whose core worker tries to recover its
lost objects does, until something ends it."""

import subprocess
import sys
import time

import psutil

from gridbench.gridsearch.lifecycle import SearchDirectory, Watchdog

if __name__ == "__main__":
    directory = SearchDirectory(keep=False)
    (directory.path / "ray").mkdir()
    raylet = subprocess.Popen(["sleep", "120"])
    watchdog = Watchdog(directory)
    started = psutil.Process(raylet.pid).create_time()
    watchdog.guard({raylet.pid: started})
    watchdog.guard_raylet(raylet.pid, started)
    watchdog.describe_search({"journal": sys.argv[1], "tracking_uri": sys.argv[2], "parent_run_id": "abc",
                              "resume": "gridbench search digits --resume abc", "trials_total": 2,
                              "ray_dir": str(directory.path / "ray")})  # fmt: skip
    print(raylet.pid, directory.path, flush=True)
    time.sleep(120)
