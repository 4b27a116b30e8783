#!/usr/bin/env bash
# Validates the verdict's projection and its interval on a GPU machine (issue "One verdict you can
# trust"): for each workload, a short `--device both` pair run twice (the first fills the compile
# cache; the second is the source) and the long pair it projects; then, offline, each source is
# projected to the long pair's size and compared with it (benchmarks/verdict_table.py).
# Workloads: the headline MLP grid (mnist, 8 configurations), a CNN (mnist-cnn, 16 filters, 5,000
# training samples, 3 learning rates) and the digits MLP (4 configurations).
#
# Usage: benchmarks/verdict_check.sh OUTDIR DATA_DIR WORKLOAD...   (workloads: mlp cnn digits)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); shift 2
mkdir -p "$out/work"; cd "$out/work"
uri="sqlite:///$out/work/mlflow.db"

pair() {  # NAME EXPERIMENT [ARGS...]: one `--device both` pair, as a user types it
  local name=$1 experiment=$2; shift 2
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search "$experiment" --device both --backend jax \
    --data-dir "$data" --tracking-uri "$uri" --compile-cache persistent --no-log "$@" >"$out/$name.txt" 2>&1
  grep -o "parent run [0-9a-f]*" "$out/$name.txt" | awk '{print $3}' | tr '\n' ' ' >"$out/$name.ids"
  echo "$name: $(cat "$out/$name.ids")| $(grep '^verdict' "$out/$name.txt") | $(tail -1 "$out/$name.txt")"
}

cnn=(--set train_size=5000 --set filters=16 --set batch_size=128 --grid learning_rate=0.001,0.0003,0.0001)
for workload in "$@"; do
  case $workload in
    mlp) pair mlp-a mnist --set epochs=3; pair mlp-b mnist --set epochs=3; pair mlp-long mnist --set epochs=8 ;;
    cnn) pair cnn-a mnist-cnn "${cnn[@]}" --set epochs=3; pair cnn-b mnist-cnn "${cnn[@]}" --set epochs=3
         pair cnn-long mnist-cnn "${cnn[@]}" --set epochs=9 ;;
    digits) pair digits-a digits --set epochs=3; pair digits-b digits --set epochs=3
            pair digits-long digits --set epochs=30 ;;
  esac
done
echo "all done"
