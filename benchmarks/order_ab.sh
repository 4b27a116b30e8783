#!/usr/bin/env bash
# Longest first against the grid's order at 4 GPUs, on one machine in one call (issue "Everything around the
# training"): after a 10-epoch fill of the compile cache, `scale --gpus 2,4` at 300 epochs (its 4-GPU count
# starts its trials longest first, by the 2-GPU count's times), then `scale --gpus 4` alone (one count: the
# grid's order). The first command's warm-up also shows whether programs cached at 10 epochs are found ready
# at 300 (the ready files' names, fe6c13f).
#
# Usage: benchmarks/order_ab.sh OUTDIR DATA_DIR       (on a machine of 4 GPUs)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); mkdir -p "$out"
{ git rev-parse HEAD; git status --short; nvidia-smi -L; } >"$out/provenance.txt" 2>&1
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
S=(python3 -m gridbench scale mnist --backend jax --data-dir "$data" --grid hidden_units=256,512,1024,2048
   --tracking-uri "sqlite:///$out/mlflow.db")
step() { local name=$1; shift; local t0=$(date +%s)
  "${S[@]}" "$@" --out "$out/$name" >"$out/$name.txt" 2>&1
  echo "$name rc $? wall $(( $(date +%s) - t0 )) s: ${S[*]} $*" | tee -a "$out/calls.txt"; }
step fill --gpus 1 --set epochs=10
step longest --gpus 2,4 --set epochs=300
step grid --gpus 4 --set epochs=300
python3 - "$out/mlflow.db" <<'PY' >"$out/warmup-tags.txt"
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
for start, value in db.execute("select r.start_time, t.value from runs r join tags t on t.run_uuid = r.run_uuid "
                               "where t.key = 'compile_warmup' order by r.start_time"):
    print(start, value)
PY
cat "$out/warmup-tags.txt"
