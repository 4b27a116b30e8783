#!/usr/bin/env bash
# The projection on a CPU machine, as tests/test_compare_e2e.py once asserted it (a timing, so a benchmark now):
# the digits pair of the end-to-end tests (JAX, 1 and 2 cores per trial, 2 epochs, no compile cache) is projected
# to 6 epochs, then the 6-epoch pair runs and is compared. Prints each figure's error, predicted / measured - 1.
#
# Usage: benchmarks/projection_check_cpu.sh OUTDIR   (run it alone on the machine: the pair is timed)
set -euo pipefail
out=$(realpath -m "$1"); mkdir -p "$out"; cd "$out"
uri="sqlite:///$out/mlflow.db"

pair() {  # EPOCHS: the two searches, their parent runs into pair-EPOCHS.ids
  for cores in 1 2; do
    python3 -m gridbench search digits --cpus-per-trial "$cores" --backend jax --set "epochs=$1" \
      --compile-cache off --tracking-uri "$uri" >"search-$1-$cores.txt" 2>&1
    grep -o "parent run [0-9a-f]*" "search-$1-$cores.txt" | awk '{print $3}'
  done >"pair-$1.ids"
}

pair 2
python3 -m gridbench compare $(cat pair-2.ids) --tracking-uri "$uri" --format json --no-log --project epochs=6 \
  >projected.json
pair 6
python3 -m gridbench compare $(cat pair-6.ids) --tracking-uri "$uri" --format json --no-log >measured.json
python3 - <<'EOF'
import json

asked = next(r for r in json.load(open("projected.json"))["projection"] if r["label"] == "asked (--project)")
measured = json.load(open("measured.json"))
for index, search in enumerate(measured["searches"]):
    predicted = asked["searches"][index]["makespan_s"]["value"]
    print(f"{search['label']}: makespan projected {predicted:.1f} s, measured {search['makespan_s']:.1f} s, "
          f"error {predicted / search['makespan_s'] - 1:+.0%}")
speedup = measured["pairings"][0]["speedup_as_run"]
print(f"speedup: projected {asked['speedup']['value']:.2f}, measured {speedup:.2f}, "
      f"error {asked['speedup']['value'] / speedup - 1:+.0%}")
EOF
