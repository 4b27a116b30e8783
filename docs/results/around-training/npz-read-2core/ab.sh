#!/usr/bin/env bash
# 5 pairs, alternately: gridbench at cde85fb (before: /tmp/ab2/before) and the working tree (after: 7c19d56's gridbench/).
. /work/main/.venv/bin/activate
cd /tmp/ab2
for i in 1 2 3 4 5; do
  for side in before after; do
    if [ $side = before ]; then pp=/tmp/ab2/before; else pp=/work/main; fi
    s=$(date +%s.%N)
    PYTHONPATH=$pp python -m gridbench search mnist --device cpu --backend jax --set epochs=2 --grid hidden_units=64 --grid batch_size=512 --data-dir /work/main/.data --tracking-uri sqlite:////tmp/ab2/$side-$i.db > /tmp/ab2/$side-$i.txt 2>&1
    rc=$?
    e=$(date +%s.%N)
    echo "$side $i rc=$rc whole $(python -c "print(round($e-$s,2))")" >> /tmp/ab2/calls.txt
  done
done
echo DONE >> /tmp/ab2/calls.txt
