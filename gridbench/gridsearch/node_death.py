"""The end of a search whose Ray node died: what a stop would have done, done by the watchdog.

    python -m gridbench.gridsearch.node_death JSON

When the search's raylet shuts down (its agent killed, the raylet stopped, the machine's Ray stopped), Ray ends
the driver at once: its core worker exits the moment its object store goes, with no Python left to run. The
watchdog (gridbench/gridsearch/watchdog.py) reads the raylet's shutdown in its log and runs this: it writes
the journal's trials to the store (what finished is kept), marks the parent KILLED with why, and prints one
line on the driver's stderr naming the node's death and the `--resume` command.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys


def raylet_death(ray_dir: str) -> str:
    """Why the raylet ended, as its log says ('dashboard_agent failed and raylet fate-shares with it')."""
    for path in glob.glob(os.path.join(ray_dir, "session_*", "logs", "raylet.out")):
        try:
            with open(path, encoding="utf-8", errors="replace") as log:
                log.seek(max(0, os.path.getsize(path) - 65536))
                found = re.findall(r'reason_message: "([^"]*)"', log.read())
        except OSError:
            continue
        if found:
            return found[-1].strip().rstrip(".")
    return "its raylet ended"


def end_search(search: dict) -> str:
    """Writes what finished, marks the parent KILLED; returns the one line for the user."""
    from mlflow import MlflowClient

    from gridbench.tracking import schema
    from gridbench.tracking.commands import sync_command
    from gridbench.tracking.schema import SearchStatus
    from gridbench.tracking.sync import children_of, sync_journal

    cause = f"the search's Ray node died ({raylet_death(search['ray_dir'])})"
    run_id, resume = search["parent_run_id"], search["resume"]
    try:
        sync_journal(search["journal"], search["tracking_uri"])
        client = MlflowClient(search["tracking_uri"])
        parent = client.get_run(run_id)
        finished = {
            (r.data.tags.get(schema.CONFIG_KEY), r.data.params.get(schema.PARAM_REPEAT))
            for r in children_of(client, parent.info.experiment_id, run_id)
            if r.info.status == SearchStatus.FINISHED.value
        }
        error = f"stopped: {cause}; continue it with `{resume}`"
        client.set_tag(run_id, schema.ERROR, error)
        client.set_terminated(run_id, status=SearchStatus.KILLED.value)
    except Exception as err:  # noqa: BLE001 - the store is out of reach: the journal still holds every record
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        return (
            f"stopped: {cause}; the store did not take the search's end ({first}): write it with "
            f"`{sync_command(search['journal'], search['tracking_uri'])}`, then continue it with `{resume}`"
        )
    return (
        f"stopped: {cause}; search {run_id} KILLED with {len(finished)} of {search['trials_total']} trials "
        f"finished; continue it with `{resume}`"
    )


def main(argv: list[str]) -> int:
    print(f"gridbench: {end_search(json.loads(argv[1]))}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
