#!/usr/bin/env bash
# Alternating: the compiling process's preparation on 2 cores, HEAD (before) against the working tree (after).
set -u
repo=/work/main; out=$1; mkdir -p $out; . $repo/.venv/bin/activate
for i in 1 2 3; do for side in before after; do
  code=$([ $side = before ] && echo /tmp/before-pc || echo $repo)
  kept=$(mktemp -d /tmp/gbp-XXXXXX); since=$(date +%s.%N)
  PYTHONPATH=$code GRIDBENCH_CACHE_DIR=$kept/cache TMPDIR=$kept KERAS_BACKEND=jax python -m gridbench search mnist \
    --device cpu --backend jax --compile-ahead on --keep-ray-logs --data-dir $repo/.data --set train_loop=compiled \
    --set epochs=2 --grid hidden_units=64 --grid learning_rate=0.001 --grid batch_size=256 \
    --tracking-uri sqlite:///$kept/m.db > $out/$side-$i.txt 2>&1
  echo "rc $? $(PYTHONPATH=$code python -c 'import gridbench; print(gridbench.__file__)')" >> $out/$side-$i.txt
  for dir in $kept/gridbench-*; do [ -d $dir/precompile ] && python $repo/benchmarks/precompile_timeline.py $dir --since $since; done > $out/$side-$i-timeline.txt 2>&1
  rm -rf $kept; done; done
