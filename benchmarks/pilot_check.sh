#!/usr/bin/env bash
# Validates `search --pilot` on a GPU machine (issue "The verdict before the search"): for each grid,
# the pilot pair (`search EXPERIMENT --device both --pilot`), then the whole pair it projects
# (`search EXPERIMENT --device both`), in one store; offline, benchmarks/pilot_table.py sets each
# pilot's projection against the whole pair as measured. Both use `--compile-cache search`, so that
# the whole pair compiles its programs as the pilot did (a persistent cache would hand the whole
# search the pilot's programs).
# Grids: the 64-configuration MLP grid of benchmarks/fused.py at 4 epochs (8 programs), and mnist-cnn's
# grid with two dropouts (16 configurations, 4 programs), 5,000 training samples, 4 epochs.
#
# Usage: benchmarks/pilot_check.sh OUTDIR DATA_DIR GRID...   (grids: mlp cnn)
set -uo pipefail
out=$(realpath "$1"); data=$(realpath "$2"); shift 2
mkdir -p "$out/work"; cd "$out/work"
uri="sqlite:///$out/work/mlflow.db"

pair() {  # NAME EXPERIMENT [ARGS...]: one `--device both` command, as a user types it, timed from outside
  local name=$1 experiment=$2; shift 2
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search "$experiment" --device both --backend jax \
    --data-dir "$data" --tracking-uri "$uri" --compile-cache search --no-log "$@" >"$out/$name.txt" 2>&1
  grep -o "parent run [0-9a-f]*" "$out/$name.txt" | awk '{print $3}' | tr '\n' ' ' >"$out/$name.ids"
  echo "$name: $(cat "$out/$name.ids")| $(grep '^verdict' "$out/$name.txt") | $(tail -1 "$out/$name.txt")"
}

mlp=(--grid hidden_units=64,128,256,512 --grid learning_rate=0.0003,0.001,0.003,0.01 --grid dropout=0,0.2
     --grid batch_size=128,256 --set epochs=4)
cnn=(--set train_size=5000 --grid dropout=0.25,0.5 --set epochs=4)
for grid in "$@"; do
  case $grid in
    mlp) pair mlp-pilot mnist "${mlp[@]}" --pilot; pair mlp-whole mnist "${mlp[@]}" ;;
    cnn) pair cnn-pilot mnist-cnn "${cnn[@]}" --pilot; pair cnn-whole mnist-cnn "${cnn[@]}" ;;
  esac
done
echo "all done"
