#!/usr/bin/env bash
set -x
repo=$PWD; out=/tmp/ab2; mkdir -p $out/work ~/.keras/datasets; cp -n .data/mnist.npz ~/.keras/datasets/
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
rm -rf /tmp/variant; mkdir /tmp/variant; cp -r $repo/gridbench $repo/experiments $repo/pyproject.toml /tmp/variant/
sed -i 's/"XLA_PYTHON_CLIENT_PREALLOCATE": "true",/"XLA_PYTHON_CLIENT_PREALLOCATE": "true" if gpus_per_trial < 1 else "false",/' /tmp/variant/gridbench/trial/gpu_memory.py
grep -n PREALLOCATE /tmp/variant/gridbench/trial/gpu_memory.py > $out/variant.txt
cd $out/work; uri=sqlite:///$out/work/mlflow.db
/usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/fill.txt 2>&1
for i in 1 2 3 4; do
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/base-$i.txt 2>&1
  (cd /tmp/variant && PYTHONPATH=/tmp/variant:/tmp/site /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri) > $out/grow-$i.txt 2>&1
done
touch $out/done
