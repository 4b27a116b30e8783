#!/usr/bin/env bash
# A CPU search on JAX's compiled loop (digits, 4 programs, 8 trials), as a user types it, in an
# empty directory, REPEATS times, with gridbench imported from SRC (a checkout: compare commits).
# Each run's output goes to /tmp/cpu-bench/NAME-I.txt, with the whole command's time at its end.
#
# Usage: benchmarks/cpu_compiled_search.sh SRC NAME REPEATS [EXTRA GRIDBENCH ARGS...]
set -uo pipefail
src=$(realpath "$1"); name=$2; repeats=$3; shift 3
out=/tmp/cpu-bench; mkdir -p "$out"
for i in $(seq 1 "$repeats"); do
  work=$(mktemp -d)
  (cd "$work" && PYTHONPATH=$src /usr/bin/time -f "whole command %e s" python3 -m gridbench search digits \
    --backend jax --set train_loop=compiled --set epochs=3 --grid hidden_units=64,128 --grid batch_size=32,64 \
    --grid learning_rate=0.01,0.001 --tracking-uri "sqlite:///$work/mlflow.db" "$@" >"$out/$name-$i.txt" 2>&1)
  rm -rf "$work"
done
grep -H -i -E "makespan|first trial|compiled ahead|trials' programs|whole command" "$out/$name"-*.txt
