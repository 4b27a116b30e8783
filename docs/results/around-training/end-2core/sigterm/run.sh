#!/usr/bin/env bash
# search digits under benchmarks/end_probe.py with END_PROBE_SIGTERM=1, RUNS times, from this checkout (/work/main).
out=$1; runs=${2:-12}; mkdir -p "$out/work"; uri="sqlite:///$out/work/mlflow.db"
cd /work/main && { git log -1 --format="code: %h"; git status --short; date -u; nproc; } > "$out/provenance.txt"
for i in $(seq 1 "$runs"); do
  (cd /work/main && END_PROBE_SIGTERM=1 PYTHONPATH=/work/main /usr/bin/time -f "whole command %e s" \
    /tmp/fresh-digits/.venv/bin/python3 benchmarks/end_probe.py search digits --tracking-uri "$uri") > "$out/run-$i.txt" 2>&1
  echo "run-$i: rc $? $(grep -h 'end probe' "$out/run-$i.txt" | tr '\n' ' ')" >> "$out/calls.txt"
done
