#!/usr/bin/env bash
# On 2 cores: one warm-up run per side (creates its store), then 5 pairs alternately: 51e21a7 (before) and df7b37b
# (after), `search mnist --device cpu --backend jax --set epochs=2 --grid hidden_units=64 --grid batch_size=512`,
# each side with a store of its own, reused; whole command by date, and the start-up line of each run.
. /work/main/.venv/bin/activate
cd /tmp/ab2
run() {  # SIDE NAME
  if [ $1 = before ]; then pp=/tmp/ab2/before; else pp=/work/main; fi
  s=$(date +%s.%N)
  PYTHONPATH=$pp python -m gridbench search mnist --device cpu --backend jax --set epochs=2 --grid hidden_units=64 \
    --grid batch_size=512 --data-dir /work/main/.data --tracking-uri sqlite:////tmp/ab2/$1.db > /tmp/ab2/$2.txt 2>&1
  rc=$?; e=$(date +%s.%N)
  echo "$2 rc=$rc whole $(python -c "print(round($e-$s,2))") s" >> /tmp/ab2/calls.txt
}
for side in before after; do run $side $side-warmup; done
for i in 1 2 3 4 5; do for side in before after; do run $side $side-$i; done; done
echo DONE >> /tmp/ab2/calls.txt
