#!/usr/bin/env bash
# One device call's job on 4 GPUs (MOST=2 COUNTS=1,2 on 2; PACKING=1: the 10-epoch grids; REFERENCES=1: peer and fused), for 6351455 (the setup hook reads the data ahead) against 6a5e5d1.
# Scale first; then GPU 0: the headline, pytest -m gpu. All 4: scale at 300 epochs over 1, 2 and 4 GPUs with --prestart-workers after a fill, and at 4
# with the code before; the 10-epoch grid one per GPU and packed, packed at 4 before too. GPU 0: the headline on an
# empty cache, then 3 triples of floor / headline / headline with --prestart-workers; the peer; the 64-configuration grid.
set -x
repo=$PWD; top=/tmp/x22; most=${MOST:-4}; counts=${COUNTS:-1,2,4}; mkdir -p $top
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1 GRIDBENCH_TEST_DATA_DIR=$repo/.data
mkdir -p /tmp/keep && cp -r $repo/.data $repo/.bench /tmp/keep/
data=/tmp/keep/.data; bench=/tmp/keep/.bench  # a copy no later call's tree can take away
export GRIDBENCH_TEST_DATA_DIR=$data
{ echo "code: $(cat $bench/commit.txt) (the working tree sent; the device copy's git HEAD is stale); before: $(cat $bench/before/REV)"; date -u; } > $top/provenance.txt
{ set -x; nvidia-smi; nproc; python3 --version; python3 -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda.*|keras|ray|mlflow.*|cupy.*|numpy) "; } > $top/env.txt 2>&1
step() { date -u +"$1 %T" >> $top/progress.txt; touch $top/$1.done; }
step start
out=$top/scale; mkdir -p $out
( source benchmarks/gpu_call_common.sh
  grid=(--grid hidden_units=256,512,1024,2048)
  sc() { local name=$1; shift; timed "$name" python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "sqlite:///$work/$name.db" "${grid[@]}" --out "$work/$name" "$@"; cp "$work/$name/scale.json" "$out/$name.json"; python3 $repo/benchmarks/trial_walls.py "$out/$name.txt" > "$out/$name-walls.txt" 2>&1; python3 $repo/benchmarks/first_trials.py "sqlite:///$work/$name.db" > "$out/$name-first.txt" 2>&1; python3 $repo/benchmarks/search_ends.py "sqlite:///$work/$name.db" > "$out/$name-ends.txt" 2>&1; }
  sc fill --gpus 1 --set epochs=10
  sc a-on --gpus $counts --set epochs=300 --prestart-workers
  PYTHONPATH="$bench/before/:$PYTHONPATH" sc a-before --gpus $most --set epochs=300 --prestart-workers
  [ -z "${PACKING:-}" ] || {
  sc b-on --gpus 1,$most --set epochs=10 --prestart-workers
  sc c-on --gpus 1,$most --set epochs=10 --prestart-workers --gpus-per-trial 0.25
  PYTHONPATH="$bench/before/:$PYTHONPATH" sc c-before --gpus $most --set epochs=10 --prestart-workers --gpus-per-trial 0.25; }
  for code in "$bench/before/:" ""; do PYTHONPATH="$code$PYTHONPATH" python3 -c "import gridbench, sys; print(sys.argv[1] or 'after', gridbench.__file__)" "$code"; done > $out/imports.txt 2>&1
  rm -rf $work )
step scale
[ -z "${SCALE_ONLY:-}" ] || { step ALL; exit 0; }
export CUDA_VISIBLE_DEVICES=0
export GRIDBENCH_CACHE_DIR=/tmp/headline-cache  # empty: the first run compiles; scale filled the default one
HEADLINE_RUNS=1 PAIRS=3 bash benchmarks/fixed_costs.sh $top/headline $data $bench headline prestart > $top/headline.log 2>&1
python3 benchmarks/search_ends.py "sqlite:///$top/headline/work/mlflow.db" > $top/headline/ends.txt 2>&1
python3 benchmarks/first_trials.py "sqlite:///$top/headline/work/mlflow.db" > $top/headline/first.txt 2>&1
rm -rf $top/headline/work
step headline
unset GRIDBENCH_CACHE_DIR
python3 -m pytest -m gpu -rs -p no:cacheprovider tests > $top/pytest-gpu.txt 2>&1
echo "pytest rc $?" >> $top/pytest-gpu.txt
step test
[ -n "${REFERENCES:-}" ] || { step ALL; exit 0; }
bash benchmarks/fixed_costs.sh $top/peer $data $bench peer > $top/peer.log 2>&1; rm -rf $top/peer/work
step peer
bash benchmarks/fixed_costs.sh $top/fused $data $bench jaxfloor fused > $top/fused.log 2>&1; rm -rf $top/fused/work
step ALL
