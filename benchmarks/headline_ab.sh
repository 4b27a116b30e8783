#!/usr/bin/env bash
# The headline as typed (`search mnist --device gpu`), programs cached, from two checkouts in turn on one GPU machine
# (issue "Everything around the training"): BASE_DIR's gridbench (e.g. `git archive REV gridbench experiments
# pyproject.toml | tar -x -C BASE_DIR`) and this checkout's, PAIRS pairs alternately, base first, after a fill of the
# compile cache by this checkout. Both share MNIST in Keras' cache, one MLflow store and the compile cache. Outputs go
# to OUTDIR: fill.txt, base-N.txt and new-N.txt (each run's output, its last line the whole command's time).
#
# Usage: benchmarks/headline_ab.sh OUTDIR DATA_DIR BASE_DIR [PAIRS]   (PAIRS: default 3)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); base=$(realpath "$3"); pairs=${4:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/work" ~/.keras/datasets; cp -n "$data/mnist.npz" ~/.keras/datasets/
uri="sqlite:///$out/work/mlflow.db"
headline() {  # NAME DIR: the headline as typed, run from DIR's gridbench
  (cd "$2" && PYTHONPATH="$2:${PYTHONPATH:-}" /usr/bin/time -f "whole command %e s" \
    python3 -m gridbench search mnist --device gpu --tracking-uri "$uri") >"$out/$1.txt" 2>&1
  echo "$1: rc $? $(tail -1 "$out/$1.txt")" | tee -a "$out/calls.txt"
}
headline fill "$here"
for pair in $(seq 1 "$pairs"); do headline "base-$pair" "$base"; headline "new-$pair" "$here"; done
echo "all done"
