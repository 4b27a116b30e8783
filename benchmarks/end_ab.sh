#!/usr/bin/env bash
# A search's end from two checkouts in turn, on this machine: `search digits` (the quick start's search) under
# benchmarks/end_probe.py, BASE_DIR's gridbench (e.g. `git archive REV gridbench experiments | tar -x -C BASE_DIR`)
# and this checkout's, PAIRS pairs, their order alternating, one MLflow store. Outputs in OUTDIR: base-N.txt and
# new-N.txt (each run's output with its "end probe:" lines), calls.txt (each run's whole time), ends.txt
# (benchmarks/search_ends.py on the store: "after" is Tune's return to the command's end).
#
# Usage: benchmarks/end_ab.sh OUTDIR BASE_DIR [PAIRS]   (PAIRS: default 6)
set -uo pipefail
out=$(realpath -m "$1"); base=$(realpath "$2"); pairs=${3:-6}
here=$(cd "$(dirname "$0")/.." && pwd)
# A new OUTDIR: calls.txt and the store are appended to, and ends.txt pairs them by position.
[ -e "$out/calls.txt" ] && { echo "end_ab.sh: $out holds an earlier run: give a new OUTDIR" >&2; exit 2; }
mkdir -p "$out/work"; uri="sqlite:///$out/work/mlflow.db"
{ git -C "$here" log -1 --format="new: %h %s"; git -C "$here" status --short; echo "base: $base"; date -u; nproc; } \
  >"$out/provenance.txt" 2>&1
run() {  # NAME DIR
  (cd "$2" && PYTHONPATH="$2" /usr/bin/time -f "whole command %e s" \
    python3 "$here/benchmarks/end_probe.py" search digits --tracking-uri "$uri") >"$out/$1.txt" 2>&1
  echo "$1: rc $? $(tail -1 "$out/$1.txt")" | tee -a "$out/calls.txt"
}
for pair in $(seq 1 "$pairs"); do
  if [ $((pair % 2)) = 1 ]; then run "base-$pair" "$base"; run "new-$pair" "$here"
  else run "new-$pair" "$here"; run "base-$pair" "$base"; fi
done
python3 "$here/benchmarks/search_ends.py" "$uri" >"$out/ends.txt" 2>&1
echo "all done"
