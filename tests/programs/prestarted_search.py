"""`python prestarted_search.py STORE on|on-tune|plain|off`: a real search of the digits grid, 2 trials at once on one
core each, with --prestart-workers on (Tune's actors without a runtime_env of Tune's, as by default; on-tune: with it,
GRIDBENCH_PLAIN_WORKERS=0), or off with Tune's actors on plain workers as by default
(gridbench.gridsearch.plain_workers), or off with plain workers off too (GRIDBENCH_PLAIN_WORKERS=0); prints `SEARCH
{json}`: the Ray workers alive when Tune started the trials, each trial's worker pid and what it reported of its
imports ahead, and the search's figures (test_prestart).

With workers started ahead (on, on-tune, plain), Tune's start waits here until the workers asked for are up (at most
60 s): the test is of where the trials land, not of how soon the workers come.
"""

import json
import os
import sys
import time

import gridbench
from gridbench.gridsearch import search_runner
from gridbench.tracking import schema

seen: dict[str, object] = {}


def workers() -> set[int]:
    """This search's Ray workers: the raylet's processes that run default_worker.py (its agents are no workers)."""
    import psutil
    import ray
    from ray._private import ray_constants

    node = ray._private.worker._global_node
    raylet = psutil.Process(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)
    found = set()
    for process in raylet.children(recursive=True):
        try:
            line = " ".join(process.cmdline())
        except psutil.Error:
            continue
        if "default_worker.py" in line or (line.startswith("ray::") and "Agent" not in line):
            found.add(process.pid)
    return found


def fit_after_looking(plan, *args, **kwargs):
    start = time.monotonic()
    while sys.argv[2] != "off" and len(workers()) < plan.concurrency and time.monotonic() < start + 60:
        time.sleep(0.2)
    seen["before_fit"] = sorted(workers())
    seen["waited_s"] = round(time.monotonic() - start, 1)  # for a failure's message: 60 means they never all came
    return real_fit(plan, *args, **kwargs)


real_fit, search_runner.fit = search_runner.fit, fit_after_looking

if __name__ == "__main__":
    store, ahead = sys.argv[1], sys.argv[2] in ("on", "on-tune")
    os.environ.pop("GRIDBENCH_PLAIN_WORKERS", None)  # plain: the default
    if sys.argv[2] in ("off", "on-tune"):
        os.environ["GRIDBENCH_PLAIN_WORKERS"] = "0"
    search = gridbench.search(
        "digits", device="cpu", params={"epochs": 2, "learning_rate": 0.01}, grid={"hidden_units": [16, 32, 64]},
        tracking_uri=store, cpus_per_trial=1, prestart_workers=ahead,
    )  # fmt: skip
    trials = [
        {"pid": int(t.tags[schema.PID]), "imported_ahead": t.tags.get(schema.WORKER_IMPORTED_AHEAD),
         "import_ahead_s": t.metrics.get(schema.WORKER_IMPORT_AHEAD_S), "import_s": t.metrics.get(schema.IMPORT_S),
         "status": t.status.value}
        for t in search.trials
    ]  # fmt: skip
    summary = search.summary
    print("SEARCH " + json.dumps({**seen, "trials": trials, "summary": summary}), flush=True)
