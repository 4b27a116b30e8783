"""The time between a search's trials, read from its store: what Tune and the driver take from one trial to the next.

Each trial run's start and end are the trial's own clock (its worker's Unix time, recorded to the
millisecond). For the trials of one worker, in order, a gap is a trial's start minus the previous
trial's end: Tune's scheduling, the actor's reset and the driver's work between them.

Usage: python benchmarks/trial_gaps.py TRACKING_URI [PARENT_RUN_ID]   (default: the newest search)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict

from gridbench.tracking import schema


def main() -> None:
    from mlflow import MlflowClient

    uri = sys.argv[1]
    client = MlflowClient(uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    if len(sys.argv) > 2:
        parent = client.get_run(sys.argv[2])
    else:
        (parent,) = client.search_runs(
            experiments, f"tags.`{schema.KIND}` = 'search'", order_by=["attributes.start_time DESC"], max_results=1
        )
    trials = client.search_runs(
        [parent.info.experiment_id], f"tags.`{schema.PARENT_RUN}` = '{parent.info.run_id}'", max_results=50000
    )
    by_worker = defaultdict(list)
    for trial in trials:
        by_worker[trial.data.tags.get(schema.PID, "?")].append((trial.info.start_time, trial.info.end_time))
    gaps = []
    for runs in by_worker.values():
        runs.sort()
        gaps += [(start - previous_end) / 1000 for (_, previous_end), (start, _) in zip(runs, runs[1:])]
    print(f"search {parent.info.run_id}: {len(trials)} trials in {len(by_worker)} worker(s), {len(gaps)} gaps")
    if gaps:
        print("gaps s:", " ".join(f"{gap:.3f}" for gap in gaps))
        print(f"mean {statistics.mean(gaps):.3f} s, median {statistics.median(gaps):.3f} s, max {max(gaps):.3f} s")


if __name__ == "__main__":
    main()
