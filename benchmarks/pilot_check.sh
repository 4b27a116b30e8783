#!/usr/bin/env bash
# Validates `search --pilot` on a GPU machine (issue "The verdict before the search"): for each grid,
# the pilot pair (`search EXPERIMENT --device both --pilot`), then the whole pair it projects
# (`search EXPERIMENT --device both`), in one store; offline, benchmarks/pilot_table.py sets each
# pilot's projection against the whole pair as measured. Both use `--compile-cache search`, so that
# the whole pair compiles its programs as the pilot did (a persistent cache would hand the whole
# search the pilot's programs).
# Grids: the 64-configuration MLP grid of benchmarks/fused.py at 4 epochs (8 programs), and mnist-cnn's
# grid with two dropouts (16 configurations, 4 programs), 5,000 training samples, 4 epochs: the runs the
# model was refined on. Fresh grids for an independent check, none of their programs in those: mlp10, 64
# MLP configurations of other widths and batch sizes (hidden units 32-384 x batch 128/512), 10 epochs;
# cnn24, 24 CNN configurations (filters 8/24 x batch 128/256 x 3 learning rates x 2 dropouts), 10 epochs.
# A step GRID-pilot or GRID-whole runs one half, so that a pair can span calls of a device's time limit;
# GRID-whole-cpu and GRID-whole-gpu run the whole pair as two commands, one device each, where it is longer
# than one call (benchmarks/pilot_table.py adds the two).
#
# Usage: benchmarks/pilot_check.sh OUTDIR DATA_DIR STEP...   (steps: warm, or mlp cnn mlp10 cnn24 mlp15 cnn11 mlp26
# cnn9 mlp21 cnn7 headline, headline_cold-whole, or NAME-pilot, NAME-whole)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); shift 2
mkdir -p "$out/work"
# What ran: the checkout's commit and what its working tree changed (a device's copy may carry an older .git).
# The diff's hash names the working tree where the commit alone does not; lscpu, the host's CPU (machines differ).
{ git rev-parse HEAD; git status --short; echo "diff sha256 $(git diff HEAD | sha256sum)"; lscpu; } \
  >"$out/provenance.txt" 2>&1
cd "$out/work"
uri="sqlite:///$out/work/mlflow.db"

pair() {  # NAME EXPERIMENT [ARGS...]: one `--device both` command, as a user types it, timed from outside
  local name=$1 experiment=$2 device=both cache=(--backend jax --compile-cache search); shift 2
  [[ $name == *-cpu ]] && device=cpu
  [[ $name == *-gpu ]] && device=gpu
  # headline: the README's pilot and pair as typed, the default (persistent) compile cache, empty at the pilot
  [[ $name == headline* ]] && cache=() && export GRIDBENCH_CACHE_DIR="$out/cache"
  # headline_cold: the same pair on an empty cache of its own, as a user would run it without a pilot
  [[ $name == headline_cold* ]] && export GRIDBENCH_CACHE_DIR="$out/cache-cold"
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search "$experiment" --device $device \
    --data-dir "$data" --tracking-uri "$uri" "${cache[@]}" --no-log "$@" >"$out/$name.txt" 2>&1
  grep -o "parent run [0-9a-f]*" "$out/$name.txt" | awk '{print $3}' | tr '\n' ' ' >"$out/$name.ids"
  echo "$name: $(cat "$out/$name.ids")| $(grep '^verdict' "$out/$name.txt") | $(tail -1 "$out/$name.txt")"
}

mlp=(--grid hidden_units=64,128,256,512 --grid learning_rate=0.0003,0.001,0.003,0.01 --grid dropout=0,0.2
     --grid batch_size=128,256 --set epochs=4)
cnn=(--set train_size=5000 --grid dropout=0.25,0.5 --set epochs=4)
mlp10=(--grid hidden_units=32,96,192,384 --grid learning_rate=0.0005,0.002,0.005,0.02 --grid dropout=0,0.3
       --grid batch_size=128,512 --set epochs=10)
cnn24=(--set train_size=5000 --grid filters=8,24 --grid batch_size=128,256 --grid learning_rate=0.0003,0.001,0.003
       --grid dropout=0.25,0.5 --set epochs=10)
# A third check, after the one-off parts' spread between a pilot and its whole search was measured on the four
# pairs above (gridbench/data/pilot_spread.toml): mlp15, 48 configurations (hidden units 48/160/320 x batch
# 96/256 x 4 learning rates x 2 dropouts), 15 epochs; cnn11, 24 configurations (filters 12/20 x batch 96/256 x
# 3 learning rates x 2 dropouts), 5,000 training samples, 11 epochs. cnn11's whole pair fits one device call of
# 10 minutes; mlp15's takes two (mlp15-whole-cpu, mlp15-whole-gpu).
mlp15=(--grid hidden_units=48,160,320 --grid learning_rate=0.0007,0.003,0.008,0.015 --grid dropout=0.1,0.4
       --grid batch_size=96,256 --set epochs=15)
cnn11=(--set train_size=5000 --grid filters=12,20 --grid batch_size=96,256 --grid learning_rate=0.0005,0.002,0.006
       --grid dropout=0.3,0.45 --set epochs=11)
# A fourth check, its grids and procedure fixed before any of its whole searches ran: the third's largest misses
# came from its first commands on a machine just started (the CPU pilot's pace 9-23% slow, the GPU pilot's XLA
# compiling 29% longer than its whole search's), so step `warm` runs one short throwaway `--device both` search
# in a store of its own first. Grids of no earlier check's programs, sized so that the whole pair is large
# beside the pilot's one-off parts (the third check's cnn11 pilot took 15.7% of its pair). First tried: mlp26
# (32 MLP configurations, 26 epochs) and cnn9 (32 CNN configurations of 4 programs, 9 epochs); their pilots
# projected CPU halves of 609 and 635 s, over a device call's 600 s, so the grids were cut before any whole
# search ran: mlp21, the same 32 MLP configurations (hidden units 80/224 x batch 112/320 x 4 learning rates x 2
# dropouts), 21 epochs; cnn7, 32 CNN configurations of 2 programs (filters 18 x batch 80/224 x 4 learning rates
# x 4 dropouts), 5,000 training samples, 7 epochs. Each whole pair ran as one command in the background across
# two device calls (NAME-whole-cpu and NAME-whole-gpu, a split pair, is not what the pilot projects: the GPU half
# alone pays a first half's start-up).
mlp26=(--grid hidden_units=80,224 --grid learning_rate=0.0006,0.002,0.006,0.012 --grid dropout=0.15,0.35
       --grid batch_size=112,320 --set epochs=26)
cnn9=(--set train_size=5000 --grid filters=14,18 --grid batch_size=80,224
      --grid learning_rate=0.0004,0.0012,0.0035,0.009 --grid dropout=0.2,0.4 --set epochs=9)
mlp21=("${mlp26[@]:0:8}" --set epochs=21)
cnn7=(--set train_size=5000 --set filters=18 --grid batch_size=80,224
      --grid learning_rate=0.0004,0.0012,0.0035,0.009 --grid dropout=0.1,0.2,0.3,0.4 --set epochs=7)
# The default path: `search mnist --device both --pilot`, then `search mnist --device both`, as README.md types them
# (mnist's own grid: 8 configurations, 4 programs, 4 epochs), with the persistent compile cache the pilot fills.
headline=()
headline_cold=()
warm() {  # a throwaway search in its own store, so that no measured command is the machine's first
  mkdir -p "$out/warm" && (cd "$out/warm" && /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist \
    --device both --backend jax --data-dir "$data" --tracking-uri "sqlite:///$out/warm/mlflow.db" \
    --compile-cache search --no-log --grid hidden_units=40,100 --set epochs=3 >"$out/warm.txt" 2>&1)
  echo "warm: $(tail -1 "$out/warm.txt")"
}
half() {  # NAME-pilot | NAME-whole | NAME-whole-cpu | NAME-whole-gpu (a whole pair too long for one device call)
  local step=${1%-[cg]pu}
  local name=${step%-*} which=${step##*-} experiment=mnist
  [[ $name == cnn* ]] && experiment=mnist-cnn
  local -n args=$name
  if [ "$which" = pilot ]; then pair "$1" $experiment "${args[@]}" --pilot; else pair "$1" $experiment "${args[@]}"; fi
}
for step in "$@"; do
  case $step in
    warm) warm ;;
    *-pilot | *-whole | *-whole-cpu | *-whole-gpu) half "$step" ;;
    *) half "$step-pilot"; half "$step-whole" ;;
  esac
done
echo "all done"
