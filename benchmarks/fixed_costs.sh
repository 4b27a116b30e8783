#!/usr/bin/env bash
# The fixed costs of issue "Fixed costs paid once per machine", on a GPU machine, with the references in the
# same call (../shared/bench copied into BENCH): the headline search as typed (MNIST in Keras' cache), run
# twice (the second finds its programs in the compile cache, now the default), and the gaps between its
# trials (benchmarks/trial_gaps.py); the bare Ray Tune floor (tune_floor.py A) and the hand-written peer
# (peer_tune.py); `--device both` twice; the 64-configuration MLP grid one trial at a time and fused
# (benchmarks/fused.py); the headline attached to a Ray kept running by this script (--address). Outputs
# go to OUTDIR.
#
# Usage: benchmarks/fixed_costs.sh OUTDIR DATA_DIR BENCH [STEP...]
#   steps: headline floor peer both fused attached jaxfloor fusedpairs prestart plain pairs preload firstrun processes against (default: the first six,
#   in that order)
#   HEADLINE_RUNS=N: the headline N times (default 2); the first on an empty compile cache, the newest in the gaps
#   jaxfloor: BENCH/fused_floor.py, the 64-configuration grid by hand in pure JAX: --mode fused twice on
#   JAX's persistent cache (the second run is the floor issue "Everything around the training" compares
#   with), then --mode trials with no cache.
#   fusedpairs: PAIRS pairs (default 3) of fused_floor.py --mode fused and the fused grid (benchmarks/fused.py --only
#   mlp-gpu-fused, its own store in fusedpair-I), in turn, the order alternating, after `fused` and `jaxfloor`, whose
#   caches both sides find: each ratio from two runs side by side, as the machine's pace drifts within a call.
#   prestart: PAIRS triples (default 3) of tune_floor.py A, the headline without and with --prestart-workers, in turn
#   (after `headline`, which fills the compile cache); the two headlines' order alternates from one triple to the next
#   (until 2026-11-28 the option always ran second).
#   plain: PAIRS triples (default 3) of tune_floor.py A, the headline with Tune's actors on plain workers
#   (GRIDBENCH_PLAIN_WORKERS=1, the default since b1e242d, gridbench.gridsearch.plain_workers) and without (0), in
#   turn, the two headlines' order alternating (after `headline`, which fills the compile cache).
#   preload: benchmarks/gpu_lib_preload.py cold and preload alternately, 3 times each, on GPU 0.
#   firstrun: FIRST_PAIRS pairs (default 2) of the headline as typed with the code in $BEFORE and with this checkout's,
#   in turn, each on an empty compile cache of its own ($GRIDBENCH_CACHE_DIR): the first run, on a machine whose page
#   cache and Ray have run before. calls.txt says which gridbench each side imported, as for `against`.
#   processes: for each of PROCESS_CORES (default "8 4": 2 and 4 processes on 16 cores), in turn, PAIRS times (default 3), the
#   headline as typed on an empty compile cache of its own, with gridbench.gridsearch.precompile.GPU_CORES_PER_PROCESS
#   set to it (and nothing else changed), its search directory kept: benchmarks/precompile_timeline.py's timeline
#   of its compiling processes in processes-CORES-I-timeline.txt.
#   pairs: PAIRS pairs (default 3) of tune_floor.py A and the headline as typed, in turn, the order alternating (after
#   `headline`, which fills the compile cache): the headline's target ratio, each from two runs side by side. `pairs`,
#   `prestart`, `plain` and `against` name their floor runs alike (floor-A-N): give each its own OUTDIR.
#   against: PAIRS triples (default 3) of tune_floor.py A, the headline as typed with the code in $BEFORE (a folder
#   holding another commit's gridbench/ and experiments/, e.g. `git archive REV gridbench experiments | tar -x -C DIR`) and with this
#   checkout's, in turn, the two headlines' order alternating (after `headline`, which fills the compile cache).
set -uo pipefail
out=$(realpath -m "$1"); data=$(realpath "$2"); bench=$(realpath "$3"); shift 3
# Resolved here, before gpu_call_common.sh cd's into $out/work: until 2026-11-27 it was resolved there, where a relative
# BEFORE named nothing, so the `before` runs imported this checkout's gridbench (docs/results/around-training.md).
before=""
if [ -n "${BEFORE:-}" ]; then
  before=$(realpath -e "$BEFORE") && [ -f "$before/gridbench/__init__.py" ] && [ -d "$before/experiments" ] \
    || { echo "BEFORE=$BEFORE holds no gridbench/ package and experiments/ beside it" >&2; exit 2; }
fi
steps=${*:-headline floor peer both fused attached}
case " $steps " in *" against "* | *" firstrun "*)
  [ -n "$before" ] || { echo "the against and firstrun steps compare with BEFORE: set it to a folder holding another commit's gridbench/ and experiments/" >&2; exit 2; } ;;
esac
# shellcheck source=benchmarks/gpu_call_common.sh
source "$(dirname "$0")/gpu_call_common.sh"  # $here, $work (cd), $uri, timed
# Which gridbench a side whose PYTHONPATH starts with $1 imports, from where its runs start, into calls.txt: `python -m`
# puts the current directory ahead of PYTHONPATH, so a run started from a checkout imports the checkout's
# (docs/results/around-training.md, eighteenth).
imports_of() { PYTHONPATH="$1${PYTHONPATH:-}" python3 -c "import gridbench; print('imports', gridbench.__file__)" \
  >>"$out/calls.txt" 2>&1; }
# fused_floor.py --mode fused as NAME, on JAX's persistent cache in $work (the jaxfloor and fusedpairs steps share it).
floor_fused() { JAX_COMPILATION_CACHE_DIR=$work/jax-floor-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 timed "$1" python3 "$bench/fused_floor.py" "$data/mnist.npz" --mode fused \
  --json "$out/$1.json"; }
# benchmarks/fused.py as NAME, its store and table in DIR, the runs given after them; on the persistent compile cache
# (fused.py's own default is a cache per search: issue 15 measured first searches).
fused_grid() { local name=$1 dir=$2; shift 2
  timed "$name" python3 "$here/benchmarks/fused.py" --out "$dir" --data-dir "$data" --compile-cache persistent "$@"; }
for step in $steps; do
  case $step in
    headline) for i in $(seq 1 "${HEADLINE_RUNS:-2}"); do timed "headline-$i" python3 -m gridbench search mnist --device gpu --tracking-uri "$uri"; done
              python3 "$here/benchmarks/trial_gaps.py" "$uri" >"$out/gaps-headline-${HEADLINE_RUNS:-2}.txt" 2>&1 ;;  # the newest run
    floor) PYTHONPATH="$bench:${PYTHONPATH:-}" timed floor-A python3 "$bench/tune_floor.py" A ;;
    peer) timed peer python3 "$bench/peer_tune.py" "$data/mnist.npz" gpu ;;
    both) for i in 1 2; do timed "both-$i" python3 -m gridbench search mnist --device both --tracking-uri "$uri"; done ;;
    fused) for i in 1 2; do  # the second finds every program in the compile cache (its table is the second's)
             fused_grid "fused-$i" "$out/fused-$i" --only mlp-gpu-trials --only mlp-gpu-fused; done ;;
    jaxfloor) mkdir -p "$work/jax-floor-cache"
      for i in 1 2; do floor_fused "jaxfloor-fused-$i"; done
      timed jaxfloor-trials python3 "$bench/fused_floor.py" "$data/mnist.npz" --mode trials \
        --json "$out/jaxfloor-trials.json" ;;
    fusedpairs) for i in $(seq 1 "${PAIRS:-3}"); do
        order="floor gridbench"; [ $((i % 2)) = 0 ] && order="gridbench floor"  # neither side always second
        for side in $order; do
          if [ "$side" = floor ]; then floor_fused "jaxfloor-fused-pair-$i"
          else fused_grid "fused-pair-$i" "$out/fusedpair-$i" --only mlp-gpu-fused
            # fused.py's whole time above also holds reading the store back and its table: gridbench's own command
            python3 -c 'import json, sys; print(sys.argv[2] + ": gridbench command_s", json.load(open(sys.argv[1]))["command_s"])' \
              "$out/fusedpair-$i/raw/mlp-gpu-fused.json" "fused-pair-$i" >>"$out/calls.txt" 2>&1; fi; done; done ;;
    prestart) for i in $(seq 1 "${PAIRS:-3}"); do
                PYTHONPATH="$bench:${PYTHONPATH:-}" timed "floor-A-$i" python3 "$bench/tune_floor.py" A
                order="no-prestart-workers prestart-workers"  # alternating: neither side always runs second
                [ $((i % 2)) = 0 ] && order="prestart-workers no-prestart-workers"
                for ahead in $order; do timed "headline-$ahead-$i" python3 -m gridbench \
                  search mnist --device gpu --tracking-uri "$uri" "--$ahead"; done; done ;;
    plain) for i in $(seq 1 "${PAIRS:-3}"); do
             PYTHONPATH="$bench:${PYTHONPATH:-}" timed "floor-A-$i" python3 "$bench/tune_floor.py" A
             order="1 0"  # alternating: neither side always runs second
             [ $((i % 2)) = 0 ] && order="0 1"
             for plain in $order; do GRIDBENCH_PLAIN_WORKERS=$plain timed "headline-plain-$plain-$i" python3 -m gridbench \
               search mnist --device gpu --tracking-uri "$uri"; done; done ;;
    pairs) for i in $(seq 1 "${PAIRS:-3}"); do
             order="floor headline"  # alternating: neither side always runs second
             [ $((i % 2)) = 0 ] && order="headline floor"
             for side in $order; do
               if [ "$side" = floor ]; then PYTHONPATH="$bench:${PYTHONPATH:-}" timed "floor-A-$i" python3 "$bench/tune_floor.py" A
               else timed "headline-pair-$i" python3 -m gridbench search mnist --device gpu --tracking-uri "$uri"; fi; done; done ;;
    against) imports_of "$before:"; imports_of ""
             for i in $(seq 1 "${PAIRS:-3}"); do
               PYTHONPATH="$bench:${PYTHONPATH:-}" timed "floor-A-$i" python3 "$bench/tune_floor.py" A
               order="before after"  # alternating: neither side always runs second (until 2026-12-08, before first)
               [ $((i % 2)) = 0 ] && order="after before"
               for side in $order; do code=$([ "$side" = before ] && echo "$before:")
                 PYTHONPATH="$code${PYTHONPATH:-}" timed "headline-$side-$i" python3 -m gridbench \
                   search mnist --device gpu --tracking-uri "$uri"; done; done ;;
    firstrun) imports_of "$before:"; imports_of ""
              for i in $(seq 1 "${FIRST_PAIRS:-2}"); do
                for side in before after; do
                  code=$([ "$side" = before ] && echo "$before:"); cache=$work/first-cache-$side-$i; rm -rf "$cache"
                  PYTHONPATH="$code${PYTHONPATH:-}" GRIDBENCH_CACHE_DIR=$cache timed "headline-first-$side-$i" \
                    python3 -m gridbench search mnist --device gpu --tracking-uri "$uri"; rm -rf "$cache"; done; done ;;
    processes) for i in $(seq 1 "${PAIRS:-3}"); do for cores in ${PROCESS_CORES:-8 4}; do
                 # A short TMPDIR: under a longer one the search's directory goes to /tmp (SearchDirectory.MAX_PATH),
                 # and on 2026-12-06 the timelines were found empty for that reason.
                 name=processes-$cores-$i; cache=$work/$name-cache; rm -rf "$cache"
                 kept=$(mktemp -d /tmp/gbp-XXXXXX); since=$(date +%s.%N)
                 TMPDIR=$kept GRIDBENCH_CACHE_DIR=$cache timed "$name" python3 -c 'import sys
from gridbench.gridsearch import precompile
precompile.GPU_CORES_PER_PROCESS = int(sys.argv.pop(1))
from gridbench.cli import run
run()' "$cores" search mnist --device gpu --tracking-uri "$uri" --keep-ray-logs
                 for dir in "$kept"/gridbench-*; do [ -d "$dir/precompile" ] && \
                   python3 "$here/benchmarks/precompile_timeline.py" "$dir" --since "$since"; done \
                   >"$out/$name-timeline.txt" 2>&1
                 rm -rf "$cache" "$kept"; done; done ;;
    preload) for i in 1 2 3; do for mode in cold preload; do
               CUDA_VISIBLE_DEVICES=0 timed "preload-$mode-$i" python3 "$here/benchmarks/gpu_lib_preload.py" "$mode"
             done; done ;;
    attached)  # a Ray kept running by a process of ours (stopped by its PID after), joined with --address
      python3 -c "import ray, time; ray.init(num_cpus=16, num_gpus=1, include_dashboard=False)
print('GCS', ray.get_runtime_context().gcs_address, flush=True); time.sleep(900)" >"$out/ray-holder.txt" 2>&1 &
      holder=$!; for _ in $(seq 60); do grep -q "^GCS " "$out/ray-holder.txt" && break; sleep 1; done
      address=$(awk '/^GCS /{print $2}' "$out/ray-holder.txt")  # Ray's log lines hold times like 01:20 too
      # the holder's ray.init turned on Ray's token authentication; a driver with an address sends it when told to
      for i in 1 2; do RAY_AUTH_MODE=token timed "attached-$i" python3 -m gridbench search mnist --device gpu \
        --tracking-uri "$uri" --address "$address"; done
      python3 "$here/benchmarks/trial_gaps.py" "$uri" >"$out/gaps-attached-2.txt" 2>&1
      kill -TERM "$holder"; wait "$holder" ;;  # a background job ignores SIGINT in a non-interactive shell
  esac
done
echo "all done"
