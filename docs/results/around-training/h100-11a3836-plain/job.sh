#!/usr/bin/env bash
# One call on one GPU, the Ray kit installed into /tmp/site by the calls before; this checkout's code (11a3836, plain
# workers the default, every worker's process start recorded): the headline as typed 3 times (the first on an empty
# compile cache), then the store read back: each search's driver timeline with its first worker's process start
# (benchmarks/prestart_timeline.py), the first trials' parts (benchmarks/first_trials.py), the trial_workers tags.
# What it asks: how long a plain worker waits idle before its first trial (room for imports ahead).
set -x
top=$OUT/h; mkdir -p $top
export PYTHONPATH=$PWD:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{ echo "code: $(cat .bench/commit.txt) (the working tree sent)"; date -u; nvidia-smi -L; nproc; } > $top/provenance.txt 2>&1
HEADLINE_RUNS=3 bash benchmarks/fixed_costs.sh $top/headline .data .bench headline > $top/headline.log 2>&1
uri=sqlite:///$top/headline/work/mlflow.db
python3 benchmarks/prestart_timeline.py $uri > $top/headline/timeline.txt 2>&1
python3 benchmarks/first_trials.py $uri > $top/headline/first-trials.txt 2>&1
python3 - "$top/headline/work/mlflow.db" > $top/headline/trial-workers.txt 2>&1 <<'PY'
import sys, mlflow
from gridbench.tracking import schema
mlflow.set_tracking_uri("sqlite:///" + sys.argv[1])
runs = mlflow.search_runs(search_all_experiments=True, output_format="list")
for r in sorted(runs, key=lambda r: r.info.start_time):
    if "mlflow.parentRunId" not in r.data.tags and r.data.tags.get(schema.KIND) == "search":
        print(r.info.run_id, "trial_workers", r.data.tags.get(schema.TRIAL_WORKERS), "workers_prestarted",
              r.data.metrics.get(schema.WORKERS_PRESTARTED), "workers_started_ahead",
              r.data.metrics.get(schema.WORKERS_STARTED_AHEAD), "startup_s", r.data.metrics.get(schema.STARTUP_S))
PY
rm -rf $top/headline/work
cd $OUT && tar -czf h.tgz h && rm -rf h
