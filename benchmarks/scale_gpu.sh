#!/usr/bin/env bash
# Several GPUs for issue "Everything around the training", in one device call on a machine of 4 GPUs: `scale mnist`
# on the 16-configuration grid of issue 28 (hidden_units=256,512,1024,2048), after a 10-epoch fill of the compile
# cache. Outputs go to OUTDIR: each command's output (NAME.txt), its scale.json (NAME.json) and exit status
# (calls.txt), and each 300-epoch run's trial walls by count (NAME-walls.txt, benchmarks/trial_walls.py).
#
# Usage: benchmarks/scale_gpu.sh OUTDIR DATA_DIR [SED]
#   a-off, a-on: 300 epochs over 1, 2 and 4 GPUs, without and with --prestart-workers (efficiency, first trials)
#   b-off:       10 epochs over 1, 2 and 4 GPUs, one trial per GPU
#   c-off:       the same, 4 trials per GPU (--gpus-per-trial 0.25): packing against b-off
#   c-variant:   (with SED) c-off again from a copy of this checkout whose gridbench/trial/gpu_memory.py SED edits
#   spy-4:       (with py-spy on PATH) b-off's 4-GPU search again, every process sampled (spy-4.raw.xz)
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); edit=${3:-}
# shellcheck source=benchmarks/gpu_call_common.sh
source "$(dirname "$0")/gpu_call_common.sh"  # $here, $work (cd), $uri, timed
grid=(--grid hidden_units=256,512,1024,2048)
scale() {  # NAME ARGS...: `scale mnist` on the grid, its JSON kept
  local name=$1; shift
  timed "$name" python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "$uri" \
    "${grid[@]}" --out "$work/$name" "$@"
  cp "$work/$name/scale.json" "$out/$name.json" 2>/dev/null
}
scale fill --gpus 1 --set epochs=10
for setting in off on; do
  scale "a-$setting" --gpus 1,2,4 --set epochs=300 "--$([ "$setting" = off ] && echo no-)prestart-workers"
  python3 "$here/benchmarks/trial_walls.py" "$out/a-$setting.txt" >"$out/a-$setting-walls.txt" 2>&1
done
scale b-off --gpus 1,2,4 --set epochs=10
scale c-off --gpus 1,2,4 --set epochs=10 --gpus-per-trial 0.25
if [ -n "$edit" ]; then
  variant=$work/variant; rm -rf "$variant"; mkdir -p "$variant"
  cp -r "$here/gridbench" "$here/experiments" "$here/pyproject.toml" "$variant/"
  sed -i "$edit" "$variant/gridbench/trial/gpu_memory.py"
  diff "$here/gridbench/trial/gpu_memory.py" "$variant/gridbench/trial/gpu_memory.py" >"$out/variant.diff"
  (cd "$variant" && PYTHONPATH="$variant:${PYTHONPATH:-}" scale c-variant --gpus 1,2,4 --set epochs=10 \
    --gpus-per-trial 0.25)
fi
if command -v py-spy >/dev/null; then
  timed spy-4 py-spy record --subprocesses --idle -r 100 -f raw -o "$out/spy-4.raw" -- \
    python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "$uri" "${grid[@]}" \
    --out "$work/spy-4" --gpus 4 --set epochs=10
  xz -f "$out/spy-4.raw"
fi
echo "all done"
