#!/usr/bin/env bash
# A program's readiness from the compile cache with whole Python tracebacks in its locations (JAX's default, kept
# where JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS is set) against gridbench's default (each operation's own line:
# gridbench.workloads.saved_programs.short_locations), in one call, no Ray. ROUNDS times (default 2), alternating, each
# side fills compile caches of its own and REPEATS fresh processes (default 4) find its programs there
# (benchmarks/program_ready.py); then both sides' saved programs are loaded again in one process
# (benchmarks/load_parts.py), and the saved programs' GPU tests run on this code. On a GPU machine, Keras in /tmp/site:
#
#   OUT=DIR bash benchmarks/tracebacks_ab.sh [ROUNDS] [REPEATS]
set -u
cd "$(dirname "$0")/.."
rounds=${1:-2}; repeats=${2:-4}; out=${OUT:?set OUT to the results folder}
export PYTHONPATH=$PWD:${PYTHONPATH:-} KERAS_BACKEND=jax
{ nvidia-smi -L; lscpu | grep -i "model name"; nproc; uptime; python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"; } > "$out/host.txt" 2>&1
for round in $(seq "$rounds"); do
  for side in full short; do
    mkdir -p "/tmp/tracebacks-$side-$round"
    date -u +"$side $round %T" >> "$out/progress.txt"
    if [ "$side" = full ]; then export JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS=1; else unset JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS; fi
    TMPDIR="/tmp/tracebacks-$side-$round" python3 benchmarks/program_ready.py --repeats "$repeats" --settings saved \
      --json "$out/ready-$side-$round.json" > "$out/ready-$side-$round.txt" 2>&1
  done
done
unset JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS
python3 benchmarks/load_parts.py 6 /tmp/tracebacks-full-1/gridbench-ready-* /tmp/tracebacks-short-1/gridbench-ready-* \
  > "$out/load_parts.txt" 2>&1
timeout 300 python3 -m pytest -q -m gpu tests/test_saved_programs.py -p no:cacheprovider > "$out/pytest-saved.txt" 2>&1
echo "pytest rc $?" >> "$out/pytest-saved.txt"
date -u +"done %T" >> "$out/progress.txt"
