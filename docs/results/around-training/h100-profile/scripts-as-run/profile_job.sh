#!/usr/bin/env bash
# Where the headline's and the fused grid's time goes outside training: py-spy over every process.
set -x
repo=$PWD; out=/tmp/prof; mkdir -p $out/work ~/.keras/datasets; cp -n .data/mnist.npz ~/.keras/datasets/
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
spy=/tmp/site/bin/py-spy
cd $out/work; uri=sqlite:///$out/work/mlflow.db
nvidia-smi > $out/nvidia-smi.txt 2>&1
for v in default nopre; do
  ( [ $v = nopre ] && export XLA_PYTHON_CLIENT_PREALLOCATE=false
    CUDA_VISIBLE_DEVICES=0 python3 - <<'PY' ) > $out/backend-$v.txt 2>&1
import time; t0=time.perf_counter()
import jax; t1=time.perf_counter()
d=jax.devices(); t2=time.perf_counter()
import jax.numpy as jnp; x=jnp.zeros(4).block_until_ready(); t3=time.perf_counter()
import keras; t4=time.perf_counter()
print(f"import jax {t1-t0:.3f} backend {t2-t1:.3f} first op {t3-t2:.3f} keras import {t4-t3:.3f}", d)
PY
done
/usr/bin/time -f "whole %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/h1.txt 2>&1
/usr/bin/time -f "whole %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/h2.txt 2>&1
$spy record --subprocesses --idle -r 100 -f raw -o $out/h3.raw -- python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/h3.txt 2>&1
$spy record --subprocesses --idle -r 100 -f raw -o $out/h4.raw -- python3 -m gridbench search mnist --device gpu --tracking-uri $uri --prestart-workers > $out/h4.txt 2>&1
python3 $repo/benchmarks/fused.py --out $out/fused-1 --data-dir $repo/.data --compile-cache persistent --only mlp-gpu-fused > $out/fused-1.txt 2>&1
$spy record --subprocesses --idle -r 100 -f raw -o $out/fused2.raw -- python3 $repo/benchmarks/fused.py --out $out/fused-2 --data-dir $repo/.data --compile-cache persistent --only mlp-gpu-fused > $out/fused-2.txt 2>&1
rm -f $out/work/mlflow.db
touch $out/done
