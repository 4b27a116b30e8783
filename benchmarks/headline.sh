#!/usr/bin/env bash
# The headline command and its CPU twin, as a user types them, in an empty directory,
# on a GPU machine set up as ../shared/device-kit says (MNIST in Keras' cache).
# Usage: benchmarks/headline.sh OUTDIR [REPEATS] [both]   (both: also --device both, the CPU twin)
set -uo pipefail
out=$(realpath "$1"); repeats=${2:-1}
work=$(mktemp -d); cd "$work"
for i in $(seq 1 "$repeats"); do
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device gpu \
    --tracking-uri "sqlite:///$work/mlflow.db" >"$out/search-mnist-gpu-$i.txt" 2>&1
done
if [ "${3:-}" = both ]; then
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device both \
    --tracking-uri "sqlite:///$work/mlflow.db" >"$out/search-mnist-both.txt" 2>&1
fi
grep -h -E "makespan|first trial|backend jax|whole command|speedup" "$out"/search-mnist-*.txt
