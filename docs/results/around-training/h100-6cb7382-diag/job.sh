#!/usr/bin/env bash
# Diagnosis: the first run on an empty cache, this checkout (A) and with device_missing() answering None at once (B),
# alternating, each with the first trial's import_s split into its steps (.bench/split_patch.py, copies only).
set -x
top=/tmp/x53; mkdir -p $top
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
mkdir -p ~/.keras/datasets && cp "$PWD"/.data/mnist.npz ~/.keras/datasets/
for v in A B; do
  repo=/tmp/r53$v; rm -rf $repo; mkdir -p $repo && cp -r "$PWD"/. $repo/ && rm -rf $repo/.devkit
  (cd $repo && python3 .bench/split_patch.py $([ $v = B ] && echo nomissing))
done
{ echo "code: $(cat .bench/commit.txt) + .bench/split_patch.py (A), + nomissing (B)"; date -u; nvidia-smi -L; } > $top/provenance.txt
for run in A1 B1 A2 B2; do
  v=${run:0:1}; repo=/tmp/r53$v; mkdir -p $top/$run
  kept=$(mktemp -d /tmp/gbd-XXXXXX); since=$(date +%s.%N)
  (cd $repo && PYTHONPATH=$repo:/tmp/site TMPDIR=$kept GRIDBENCH_SPLIT_DIR=$top/$run GRIDBENCH_CACHE_DIR=/tmp/cache53-$run \
    /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu \
    --tracking-uri sqlite:///$top/$run/s.db --keep-ray-logs > $top/$run/out.txt 2>&1
   echo "since $since" > $top/$run/since.txt
   for dir in "$kept"/gridbench-*; do [ -d "$dir/precompile" ] && PYTHONPATH=$repo:/tmp/site python3 benchmarks/precompile_timeline.py "$dir" --since "$since"; done > $top/$run/timeline.txt 2>&1
   PYTHONPATH=$repo:/tmp/site python3 .bench/dump_trials.py sqlite:///$top/$run/s.db > $top/$run/runs.jsonl 2> $top/$run/dump.err)
  rm -f $top/$run/s.db
done
touch $top/ALL.done
