"""New, empty MLflow stores for the tests: copies of one that MLflow created once in this test process.

MLflow creates a new SQLite store by running its schema's migrations. A search's driver spent 2.7 s more CPU on a
new store than on such a copy (13.0 s against 10.3 s, `search digits --set epochs=2`, 2 cores, 2026-11-25), and the
suite starts dozens of searches on new stores. A copy is the store MLflow made, byte for byte; tests of what a
search does with a store that is not there yet (test_store_uris, test_cli, test_faults) keep making their own.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path

_HOLDER = tempfile.TemporaryDirectory(prefix="gridbench-test-store-")  # goes with this test process


@functools.cache
def _made_by_mlflow() -> Path:
    from mlflow import MlflowClient

    path = Path(_HOLDER.name) / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()  # creates the tables and runs the migrations
    return path


def new_store_file(path: Path) -> Path:
    """An empty MLflow SQLite store at `path` (its directory is made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_made_by_mlflow(), path)
    return path


def new_store(directory: Path, name: str = "mlflow.db") -> str:
    """The URI of an empty MLflow SQLite store made in `directory`."""
    return f"sqlite:///{new_store_file(Path(directory) / name)}"
