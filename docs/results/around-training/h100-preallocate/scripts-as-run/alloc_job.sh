#!/usr/bin/env bash
# A/B: JAX preallocating a whole-GPU trial's share (today) against growing to the same cap.
set -x
repo=$PWD; out=/tmp/ab; mkdir -p $out/work ~/.keras/datasets; cp -n .data/mnist.npz ~/.keras/datasets/
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
git -C $repo rev-parse HEAD > $out/provenance.txt 2>&1; git -C $repo status --short >> $out/provenance.txt 2>&1
nvidia-smi > $out/nvidia-smi.txt 2>&1
for i in 1 2 3 4 5; do
  for v in pre grow; do
    p=$([ $v = pre ] && echo true || echo false)
    CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=$p XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 python3 $repo/.bench/alloc_ab.py $v >> $out/micro.txt 2>&1
  done
done
# the cap holds while growing: 0.2 of the GPU, then 0.3 of it asked
CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 python3 $repo/.bench/alloc_ab.py cap-grow 25000000000 >> $out/micro.txt 2>&1
CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=true XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 python3 $repo/.bench/alloc_ab.py cap-pre 25000000000 >> $out/micro.txt 2>&1
rm -rf /tmp/variant; mkdir /tmp/variant; cp -r $repo/gridbench /tmp/variant/
sed -i 's/"XLA_PYTHON_CLIENT_PREALLOCATE": "true",/"XLA_PYTHON_CLIENT_PREALLOCATE": "true" if gpus_per_trial < 1 else "false",/' /tmp/variant/gridbench/trial/gpu_memory.py
grep -n PREALLOCATE /tmp/variant/gridbench/trial/gpu_memory.py > $out/variant.txt
cd $out/work; uri=sqlite:///$out/work/mlflow.db
/usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/fill.txt 2>&1
for i in 1 2 3; do
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/base-$i.txt 2>&1
  PYTHONPATH=/tmp/variant:/tmp/site /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu --tracking-uri $uri > $out/grow-$i.txt 2>&1
done
touch $out/done
