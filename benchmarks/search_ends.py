"""Where each search's makespan begins and ends around its trials, read from a store (issue "Everything around the
training": the end of a search at 4 GPUs took 2.4 s against 0.5 s at 1).

    python benchmarks/search_ends.py TRACKING_URI        # every search in the store, oldest first

Per search (its scale count, where `gridbench scale` ran it), in seconds, from the parent run's metrics and the trial
runs' own start and end (each worker's clock, to the millisecond; one host):
  launch   the command's start to Tune's (startup_s: Ray's start and what overlapped it)
  head     Tune's start to the first trial's start (workers' start, the first trial's scheduling)
  window   the first trial's start to the last trial's end
  tail     the last trial's end to Tune's return: inside the makespan (Tune stopping the trials' actors, results)
  after    Tune's return to the command's end (whole_command_s: Ray's shutdown, the last records), outside it
launch + head + window + tail is the makespan's span from the command's start; reads the store only.
"""

from __future__ import annotations

import sys

from gridbench.tracking import schema
from gridbench.tracking.sync import children_of

SPANS = ("launch", "head", "window", "tail", "after")  # the columns, in the order they follow one another


def ends(client, parent) -> dict[str, float] | None:
    """The five spans of one search, or None where it ran no trial, lacks the metrics or has a trial without an end."""
    trials = children_of(client, parent.info.experiment_id, parent.info.run_id)
    metrics = parent.data.metrics
    needed = (schema.TIME_TO_FIRST_TRIAL_S, schema.STARTUP_S, schema.MAKESPAN_S)
    if not trials or any(name not in metrics for name in needed) or any(t.info.end_time is None for t in trials):
        return None  # no trial, an older record, or a trial still running (an interrupted search)
    first_start = min(t.info.start_time for t in trials) / 1000
    last_end = max(t.info.end_time for t in trials) / 1000
    command_start = first_start - metrics[schema.TIME_TO_FIRST_TRIAL_S]
    tune_start = command_start + metrics[schema.STARTUP_S]
    tune_end = tune_start + metrics[schema.MAKESPAN_S]
    spans = {
        "launch": tune_start - command_start,
        "head": first_start - tune_start,
        "window": last_end - first_start,
        "tail": tune_end - last_end,
    }
    if schema.WHOLE_COMMAND_S in metrics:
        spans["after"] = metrics[schema.WHOLE_COMMAND_S] - (tune_end - command_start)
    return spans


def main() -> None:
    from mlflow import MlflowClient

    client = MlflowClient(sys.argv[1])
    experiments = [e.experiment_id for e in client.search_experiments()]
    searches = client.search_runs(
        experiments, f"tags.`{schema.KIND}` = 'search'", order_by=["attributes.start_time ASC"], max_results=1000
    )
    print(f"{'search':34s} {'count':>5s} {'trials':>6s} " + " ".join(f"{s:>8s}" for s in SPANS))
    for parent in searches:
        spans = ends(client, parent)
        if spans is None:
            continue
        count = parent.data.tags.get(schema.SCALE_COUNT, "-")
        trials = int(parent.data.metrics.get(schema.TRIALS_FINISHED, 0))
        cells = " ".join(f"{spans[s]:8.3f}" if s in spans else f"{'-':>8s}" for s in SPANS)
        print(f"{parent.info.run_id:34s} {count:>5s} {trials:>6d} {cells}")


if __name__ == "__main__":
    main()
