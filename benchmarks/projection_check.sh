#!/usr/bin/env bash
# Validates `gridbench compare --project` on a GPU machine (issue "The verdict at every size"):
# the headline pair (`search mnist --device both`, 8 configurations, 4 epochs) is run once cold
# (a fresh machine's first search, for its account) and once with its programs in the compile
# cache; that pair is projected to 20 epochs and to 64 configurations at 10 epochs (16 learning
# rates: the same programs, the same mix); then both larger pairs run and are compared.
# Every output goes to OUTDIR; summarise it with benchmarks/projection_table.py OUTDIR.
#
# Usage: benchmarks/projection_check.sh OUTDIR DATA_DIR [STEP...]   (steps: cold small project e20 c64)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); shift 2
steps=${*:-cold small project e20 c64}
work=${GRIDBENCH_CHECK_WORK:-$out/work}; mkdir -p "$work"; cd "$work"
uri="sqlite:///$work/mlflow.db"
lrs=0.0001,0.00013,0.00017,0.00022,0.0003,0.0004,0.0005,0.00065,0.0008,0.001,0.0013,0.0017,0.0022,0.0027,0.0033,0.004

pair() {  # NAME [ARGS...]: one `--device both` search pair, as a user types it
  local name=$1; shift
  /usr/bin/time -f "whole command %e s" python3 -m gridbench search mnist --device both --data-dir "$data" \
    --tracking-uri "$uri" --compile-cache persistent "$@" >"$out/$name.txt" 2>&1
  grep -o "parent run [0-9a-f]*" "$out/$name.txt" | awk '{print $3}' >"$out/$name.ids"
  echo "$name done: $(tr '\n' ' ' <"$out/$name.ids")$(tail -1 "$out/$name.txt")"
}

compare_json() {  # NAME IDS_FILE [ARGS...]
  local name=$1 ids=$2; shift 2
  python3 -m gridbench compare $(cat "$ids") --tracking-uri "$uri" --format json --no-log "$@" \
    >"$out/$name.json" 2>"$out/$name.err"
}

for step in $steps; do
  case $step in
    cold) pair cold ;;
    small) pair small ;;
    project)
      compare_json project-e20 "$out/small.ids" --project epochs=20
      compare_json project-c64 "$out/small.ids" --project epochs=10,configs=64 ;;
    e20) pair e20 --set epochs=20 && compare_json measured-e20 "$out/e20.ids" ;;
    c64) pair c64 --set epochs=10 --grid "learning_rate=$lrs" && compare_json measured-c64 "$out/c64.ids" ;;
  esac
done
echo "all done"
