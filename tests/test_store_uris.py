"""Store URIs: a bad one is refused in one line, before Ray starts; a new SQLite store
created by two searches at once works for both."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from trainings import PROGRAMS

from gridbench.errors import UserError
from gridbench.tracking.store import check_tracking_uri


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _bad_uris(tmp_path):
    not_database = tmp_path / "notes.db"
    not_database.write_text("these are my notes, not a database\n")
    return {
        "unsupported scheme": ("ftp://x", "unsupported scheme ftp:"),
        # os.access says yes to root here; only writing tells.
        "unwritable location": ("sqlite:////proc/mlflow.db", "cannot write in /proc"),
        "missing directory": (f"sqlite:///{tmp_path}/no/such/dir/mlflow.db", "does not exist"),
        "not a database": (f"sqlite:///{not_database}", "is not an SQLite database"),
        "server unreachable": (f"http://127.0.0.1:{_free_port()}", "does not answer"),
    }


@pytest.mark.parametrize(
    "case", ["unsupported scheme", "unwritable location", "missing directory", "not a database", "server unreachable"]
)
def test_a_bad_store_is_refused_in_one_line_before_ray_starts(case, tmp_path):
    uri, says = _bad_uris(tmp_path)[case]
    imported = tmp_path / "imported.txt"
    result = subprocess.run(
        [sys.executable, PROGRAMS / "imported_by_command.py", imported, "search", "digits", "--tracking-uri", uri],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "GRIDBENCH_JOURNAL_DIR": str(tmp_path / "journal")},
    )
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""  # no plan printed: nothing ran
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gridbench: error: ") and says in lines[0], result.stderr
    assert "--tracking-uri" in lines[0]  # says how to fix it
    assert imported.read_text() == ""  # refused before Ray (or any framework) was imported, let alone started
    assert not (tmp_path / "journal").exists()
    assert not list(tmp_path.glob("**/mlflow.db"))


def test_an_sqlite_database_of_another_program_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE customers (name TEXT)")
    connection.close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="is an SQLite database but not an MLflow store"):
        check_tracking_uri(f"sqlite:///{path}")
    assert path.read_bytes() == before


@pytest.mark.slow
def test_two_searches_creating_one_new_sqlite_store_at_once_both_succeed(tmp_path):
    """Without the lock, both of two tries here failed (alembic: "expected to match one row")."""
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    go = tmp_path / "go"
    searches = [
        subprocess.Popen(
            [sys.executable, PROGRAMS / "open_store_at_once.py", store, str(go), str(tmp_path / f"ready{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all((tmp_path / f"ready{i}").exists() for i in range(2)) and time.monotonic() < deadline:
            time.sleep(0.05)
        go.touch()
        outputs = [search.communicate(timeout=120) for search in searches]
    finally:
        for search in searches:
            if search.poll() is None:
                search.kill()
    assert [search.returncode for search in searches] == [0, 0], [err[-2000:] for _, err in outputs]
    from mlflow import MlflowClient

    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("gridbench/digits").experiment_id])
    assert sorted(r.info.run_id for r in runs) == sorted(out.strip() for out, _ in outputs)
