#!/usr/bin/env bash
# A saved program's readiness, two versions of gridbench in one call, in turn (issue "Everything around the
# training": a program from the cache ready in at most 0.1 s). Each version runs benchmarks/program_ready.py
# (every process fresh, every cache its own), twice, alternating.
#
# Usage: benchmarks/program_ready_ab.sh OUTDIR BASE_CODE NEW_CODE [DATA]   (on a GPU machine)
#   BASE_CODE, NEW_CODE: directories holding a gridbench/ package (e.g. `git archive REV gridbench | tar -x -C DIR`)
set -uo pipefail
out=$(realpath -m "$1"); base=$(realpath "$2"); new=$(realpath "$3"); data=${4:+--data $(realpath "$4")}
mkdir -p "$out"
here=$(dirname "$(realpath "$0")")
for round in 1 2; do
    for side in base new; do
        code=$base; [ "$side" = new ] && code=$new
        echo "== $side round $round ($(date -u +%H:%M:%S) UTC, code $code)" | tee -a "$out/ab.txt"
        PYTHONPATH="$code:${PYTHONPATH:-}" python3 "$here/program_ready.py" $data --repeats 5 \
            --json "$out/$side-$round.json" >>"$out/ab.txt" 2>&1
        echo "rc $?" >>"$out/ab.txt"
    done
done
grep -E "^==|saved .*\]|jax-cache .*\]" "$out/ab.txt"
