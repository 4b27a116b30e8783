#!/usr/bin/env bash
# 5 pairs, alternately: gridbench at HEAD (before: /tmp/ab/before) and the working tree (after).
. /work/main/.venv/bin/activate
cd /tmp/ab
for i in 1 2 3 4 5; do
  for side in before after; do
    if [ $side = before ]; then pp=/tmp/ab/before; else pp=/work/main; fi
    s=$(date +%s.%N)
    PYTHONPATH=$pp python -m gridbench search mnist --device cpu --backend jax --set epochs=2 --set train_loop=compiled --grid hidden_units=64 --grid batch_size=512 --data-dir /work/main/.data --tracking-uri sqlite:////tmp/ab/$side-$i.db > /tmp/ab/$side-$i.txt 2>&1
    e=$(date +%s.%N)
    echo "$side $i rc=$? whole $(python -c "print(round($e-$s,2))")" >> /tmp/ab/calls.txt
  done
done
echo DONE >> /tmp/ab/calls.txt
