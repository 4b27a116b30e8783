"""`python open_store_at_once.py STORE GO READY`: opens STORE as a search does, at the moment the file GO appears.

Two of these, started together, create one new SQLite store at once (test_store_uris). READY is touched once the
imports are done, so that both open the store at the same moment; the parent run's id is printed.
"""

import sys
import time
from pathlib import Path

import mlflow  # noqa: F401 - imported before the start signal, so that both open the store at once

from gridbench.tracking.store import MlflowRecorder

if __name__ == "__main__":
    store, go, ready = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    ready.touch()
    while not go.exists():
        time.sleep(0.01)
    recorder = MlflowRecorder(store, "digits")
    print(recorder.start("digits", {"epochs": 1}, {}, {}))
