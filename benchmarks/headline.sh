#!/usr/bin/env bash
# The headline command as a user types it, in an empty directory, on a GPU machine set up
# as ../shared/device-kit says (MNIST in Keras' cache). Each run's output goes to
# OUTDIR/NAME-I.txt, with the whole command's time at its end.
#
# Usage: benchmarks/headline.sh OUTDIR NAME REPEATS DEVICE [EXTRA GRIDBENCH ARGS...]
#   benchmarks/headline.sh out gpu 2 gpu                               # `search mnist --device gpu`, twice
#   benchmarks/headline.sh out both 1 both                             # and its CPU twin
#   benchmarks/headline.sh out warm 2 gpu --compile-cache persistent   # programs kept across searches
set -uo pipefail
out=$(realpath -m "$1"); name=$2; repeats=$3; device=$4; shift 4
work=$(mktemp -d); cd "$work"
for i in $(seq 1 "$repeats"); do
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device "$device" "$@" \
    --tracking-uri "sqlite:///$work/mlflow.db" >"$out/$name-$i.txt" 2>&1
done
grep -H -E "makespan|first trial|trials. programs|compiled ahead|backend jax|whole command|speedup" "$out/$name"-*.txt
