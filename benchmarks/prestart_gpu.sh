#!/usr/bin/env bash
# Workers started ahead (--prestart-workers) on a GPU machine, for issue "Everything around the training", with the
# references in the same call (../shared/bench copied into BENCH). Outputs go to OUTDIR.
#
# Usage: benchmarks/prestart_gpu.sh OUTDIR DATA_DIR BENCH [STEP...]
#   headline: `search mnist --device gpu` as typed, first on an empty compile cache, then with its programs cached,
#             without and with workers started ahead
#             (--prestart-workers; off is the default), alternately (2 pairs); then tune_floor.py A and peer_tune.py.
#   scale:    (needs 4 GPUs) a 10-epoch fill of the compile cache; (a) 300 epochs over 1, 2 and 4 GPUs with workers
#             started ahead; (b) 10 epochs, one trial per GPU, and (c) 4 per GPU, each without and with them.
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); bench=$(realpath "$3"); shift 3
steps=${*:-headline scale}
# shellcheck source=benchmarks/gpu_call_common.sh
source "$(dirname "$0")/gpu_call_common.sh"  # $here, $work (cd), $uri, timed
scale() {  # NAME ARGS...: `scale mnist` on the 16-configuration grid of issue 28, its JSON kept
  local name=$1; shift
  timed "$name" python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "$uri" \
    --grid hidden_units=256,512,1024,2048 --out "$work/$name" "$@"
  cp "$work/$name/scale.json" "$out/$name.json" 2>/dev/null
}
for step in $steps; do
  case $step in
    headline)
      timed headline-1 python3 -m gridbench search mnist --device gpu --tracking-uri "$uri"  # as typed: the default
      for pair in 1 2; do
        timed "headline-off-$pair" python3 -m gridbench search mnist --device gpu --tracking-uri "$uri" \
          --no-prestart-workers
        timed "headline-on-$pair" python3 -m gridbench search mnist --device gpu --tracking-uri "$uri" \
          --prestart-workers
      done
      PYTHONPATH="$bench:${PYTHONPATH:-}" timed floor-A python3 "$bench/tune_floor.py" A
      timed peer python3 "$bench/peer_tune.py" "$data/mnist.npz" gpu ;;
    scale)
      scale fill --gpus 1 --set epochs=10
      scale a --gpus 1,2,4 --set epochs=300 --prestart-workers
      for setting in off on; do
        flag=$([ "$setting" = off ] && echo --no-prestart-workers || echo --prestart-workers)
        scale "b-$setting" --gpus 1,2,4 --set epochs=10 "$flag"
        scale "c-$setting" --gpus 1,2,4 --set epochs=10 --gpus-per-trial 0.25 "$flag"
      done ;;
  esac
done
echo "all done"
