#!/usr/bin/env bash
# JAX preallocating a whole-GPU trial's share of memory against growing to the same cap, on one GPU (issue
# "Everything around the training"): benchmarks/gpu_first_op.py in fresh processes, 5 pairs alternately, the cap
# checked both ways; then the headline (`search mnist --device gpu`) after a fill of the compile cache, 4 pairs
# alternately: this checkout as it is ("base") and a copy of it whose gpu_memory.py is edited by SED ("variant").
#
# Usage: benchmarks/preallocate_ab.sh OUTDIR DATA_DIR SED
#   e.g. at 8e83827..b0bdcd1 (preallocating), SED turned growing on for whole GPUs:
#   's/"XLA_PYTHON_CLIENT_PREALLOCATE": "true",/"XLA_PYTHON_CLIENT_PREALLOCATE": "true" if gpus_per_trial < 1 else "false",/'
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); edit=$3
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/work" ~/.keras/datasets; cp -n "$data/mnist.npz" ~/.keras/datasets/
for _ in 1 2 3 4 5; do
  for setting in true false; do
    CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=$setting XLA_PYTHON_CLIENT_MEM_FRACTION=0.9 \
      python3 "$here/benchmarks/gpu_first_op.py" "preallocate-$setting" >>"$out/first-op.txt" 2>&1
  done
done
for setting in false true; do  # 0.2 of the GPU as the cap, then 25 GB asked
  CUDA_VISIBLE_DEVICES=0 XLA_PYTHON_CLIENT_PREALLOCATE=$setting XLA_PYTHON_CLIENT_MEM_FRACTION=0.2 \
    python3 "$here/benchmarks/gpu_first_op.py" "cap-preallocate-$setting" 25000000000 >>"$out/first-op.txt" 2>&1
done
variant=$out/variant; rm -rf "$variant"; mkdir -p "$variant"
cp -r "$here/gridbench" "$here/experiments" "$here/pyproject.toml" "$variant/"
sed -i "$edit" "$variant/gridbench/trial/gpu_memory.py"
grep -n PREALLOCATE "$variant/gridbench/trial/gpu_memory.py" >"$out/variant.txt"
uri="sqlite:///$out/work/mlflow.db"
headline() {  # NAME DIR: the headline as typed, run from DIR's gridbench
  (cd "$2" && PYTHONPATH="$2:${PYTHONPATH:-}" /usr/bin/time -f "whole command %e s" \
    python3 -m gridbench search mnist --device gpu --tracking-uri "$uri") >"$out/$1.txt" 2>&1
}
headline fill "$here"
for pair in 1 2 3 4; do headline "base-$pair" "$here"; headline "variant-$pair" "$variant"; done
echo "all done"
