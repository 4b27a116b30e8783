"""Searches left RUNNING by a driver that was killed outright (SIGKILL, a lost machine).

A search's parent run records its driver (host, pid and the process's start time). A
RUNNING search whose driver is no longer alive on this host is stale: the first command
that opens the store marks it KILLED, with an error that says how to resume it. A
search driven from another host is left as it is: its driver cannot be seen from here.
"""

from __future__ import annotations

import os
import socket
from typing import Iterable, Mapping

from gridbench.tracking import schema
from gridbench.tracking.schema import SearchStatus


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


def stale_error(run) -> str:
    tags = run.data.tags
    spec = tags.get(schema.SPEC_NAME, "EXPERIMENT")
    return (
        f"its driver (pid {schema.tag_value(tags, schema.DRIVER_PID)} on {schema.tag_value(tags, schema.DRIVER_HOST)}) "
        f"died without ending it; "
        f"continue it with `gridbench search {spec} --resume {run.info.run_id}` (and the options it ran with)"
    )


def mark_stale(client, runs: Iterable) -> list[str]:
    """Marks each RUNNING search among `runs` whose driver is dead KILLED; returns their run ids."""
    marked = []
    for run in runs:
        if run.info.status != SearchStatus.RUNNING.value or run.data.tags.get(schema.KIND) != "search":
            continue
        if driver_alive(run.data.tags) is False:
            client.set_tag(run.info.run_id, schema.ERROR, stale_error(run))
            client.set_terminated(run.info.run_id, status=SearchStatus.KILLED.value)
            marked.append(run.info.run_id)
    return marked


def mark_stale_searches(client, experiment_ids: list[str]) -> list[str]:
    """Finds and marks the stale searches of these experiments; returns their run ids."""
    if not experiment_ids:
        return []
    running = client.search_runs(
        experiment_ids,
        filter_string=f"tags.`{schema.KIND}` = 'search' and attributes.status = '{SearchStatus.RUNNING.value}'",
        max_results=1000,
    )
    return mark_stale(client, running)
