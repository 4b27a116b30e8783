#!/usr/bin/env bash
# Whether `scale`'s compile warm-up finds every program ready once they are all in the cache, whatever the
# epochs and the GPU's share (issue "Everything around the training": at most 1 s when everything is cached).
# A 3-epoch scale fills the persistent cache; then the same grid at 6 epochs, and packed 2 per GPU. Each
# search run's compile_warmup tag says what its warm-up found and how long it took.
#
# Usage: benchmarks/ready_check.sh OUTDIR DATA_DIR      (on a GPU machine; prints the tags)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2")
mkdir -p "$out"; export GRIDBENCH_CACHE_DIR="$out/cache"
S=(python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "sqlite:///$out/mlflow.db" --gpus 1)
"${S[@]}" --set epochs=3 >"$out/fill.txt" 2>&1; echo "fill rc $?"
"${S[@]}" --set epochs=6 >"$out/epochs6.txt" 2>&1; echo "epochs=6 rc $?"
"${S[@]}" --set epochs=3 --gpus-per-trial 0.5 >"$out/share.txt" 2>&1; echo "share 0.5 rc $?"
python3 - "$out/mlflow.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute("select r.start_time, t.value from runs r join tags t on t.run_uuid = r.run_uuid "
                  "where t.key = 'compile_warmup' order by r.start_time").fetchall()
for _, value in rows:
    print(value)
PY
