"""Searches left RUNNING by a driver that was killed outright (SIGKILL, a lost machine).

A search's parent run records its driver (host, pid and the process's start time). A
RUNNING search whose driver is no longer alive on this host is stale: the first command
that opens the store marks it KILLED, with an error that says how to resume it. A
search driven from another host is left as it is: its driver cannot be seen from here.

Unless its records wait in its journal (the parent's `journal.path`): a driver that ended
while the store was down leaves the search RUNNING with its trials and totals in the
journal. Such a search is never marked KILLED (its `--resume` would train those trials
again); the command names `gridbench sync` instead, and `search --resume` syncs it first.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Iterable, Mapping

from gridbench.errors import UserError
from gridbench.tracking import commands, schema
from gridbench.tracking.journal import read_journal
from gridbench.tracking.schema import SearchStatus
from gridbench.tracking.sync import unsynced


def driver_tags() -> dict[str, str]:
    """This process as a search's driver."""
    import psutil

    return {
        schema.DRIVER_HOST: socket.gethostname(),
        schema.DRIVER_PID: str(os.getpid()),
        schema.DRIVER_STARTED: f"{psutil.Process().create_time():.3f}",
    }


def driver_alive(tags: Mapping[str, str]) -> bool | None:
    """True or False for a driver on this host; None where it cannot be told (another host, no driver tags)."""
    import psutil

    names = (schema.DRIVER_HOST, schema.DRIVER_PID, schema.DRIVER_STARTED)
    tags = {name: schema.tag_value(tags, name) for name in names}
    if tags[schema.DRIVER_HOST] != socket.gethostname() or not tags[schema.DRIVER_PID]:
        return None
    try:
        process = psutil.Process(int(tags[schema.DRIVER_PID]))
        started = f"{process.create_time():.3f}"
    except (psutil.Error, ValueError):
        return False
    return started == (tags[schema.DRIVER_STARTED] or started) and process.status() != psutil.STATUS_ZOMBIE


def resume_command(run_id: str, tracking_uri: str | None = None) -> str:
    """The command that continues a search, as it is pasted: the spec and options come from its parent run; the
    store is named unless it is the one a command here opens by default."""
    from gridbench.tracking.store import resolve_tracking_uri

    named = tracking_uri and resolve_tracking_uri(tracking_uri) != resolve_tracking_uri(None)
    return commands.resume_command(run_id, tracking_uri if named else None)


def stale_error(run, tracking_uri: str | None = None) -> str:
    tags = run.data.tags
    return (
        f"its driver (pid {schema.tag_value(tags, schema.DRIVER_PID)} on {schema.tag_value(tags, schema.DRIVER_HOST)}) "
        f"died without ending it; continue it with `{resume_command(run.info.run_id, tracking_uri)}`"
    )


def pending_journal(client, run) -> Path | None:
    """The journal of this search if it holds records the store lacks (read on this host), else None."""
    path = run.data.tags.get(schema.JOURNAL_PATH)
    if not path or not Path(path).is_file():
        return None
    try:
        contents = read_journal(path)  # its damaged lines skipped: a journal never stops a report or the UI
    except UserError:
        return None
    if run.info.run_id not in (contents.parent_run_id, contents.resumed):
        return None
    try:
        return contents.path if unsynced(client, run, contents) else None
    except Exception:  # noqa: BLE001 - a store that cannot answer now: say nothing, mark nothing
        return None


def sync_hint(run, journal: Path, tracking_uri: str | None) -> str:
    return (
        f"search {run.info.run_id} is RUNNING in the store, but its driver has exited with records the store lacks "
        f"in its journal; write them with: {commands.sync_command(str(journal), tracking_uri)} (then, if trials are "
        f"left, continue it with `{resume_command(run.info.run_id, tracking_uri)}`)"
    )


_told: set[str] = set()  # each waiting search is named once per command


def mark_stale(client, runs: Iterable, tracking_uri: str | None = None) -> list[str]:
    """Marks each RUNNING search among `runs` whose driver is dead KILLED; returns their run ids.

    One whose records wait in its journal is left RUNNING and named, with the sync command, on stderr.
    A store that cannot be written (read-only) is left as it is.
    """
    marked = []
    for run in runs:
        if run.info.status != SearchStatus.RUNNING.value or run.data.tags.get(schema.KIND) != "search":
            continue
        if driver_alive(run.data.tags) is not False:
            continue
        journal = pending_journal(client, run)
        if journal is not None:
            if run.info.run_id not in _told:
                _told.add(run.info.run_id)
                print(f"gridbench: {sync_hint(run, journal, tracking_uri)}", file=sys.stderr, flush=True)
            continue
        try:
            client.set_tag(run.info.run_id, schema.ERROR, stale_error(run, tracking_uri))
            client.set_terminated(run.info.run_id, status=SearchStatus.KILLED.value)
        except Exception:  # noqa: BLE001 - a read-only store: shown as it is, RUNNING
            continue
        marked.append(run.info.run_id)
    return marked


def waiting_searches(client, experiment_ids: list[str]) -> list[tuple[str, Path]]:
    """(run id, journal) of each RUNNING search of these experiments whose driver has exited with records
    waiting in its journal."""
    waiting = []
    for run in _running(client, experiment_ids):
        if driver_alive(run.data.tags) is False:
            journal = pending_journal(client, run)
            if journal is not None:
                waiting.append((run.info.run_id, journal))
    return waiting


def _running(client, experiment_ids: list[str]) -> list:
    if not experiment_ids:
        return []
    return client.search_runs(
        experiment_ids,
        filter_string=f"tags.`{schema.KIND}` = 'search' and attributes.status = '{SearchStatus.RUNNING.value}'",
        max_results=1000,
    )


def mark_stale_searches(client, experiment_ids: list[str], tracking_uri: str | None = None) -> list[str]:
    """Finds and marks the stale searches of these experiments; returns their run ids."""
    return mark_stale(client, _running(client, experiment_ids), tracking_uri)
