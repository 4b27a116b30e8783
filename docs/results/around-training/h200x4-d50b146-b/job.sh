#!/usr/bin/env bash
# The second device call's job on the same 4 GPUs: the 10-epoch grid one per GPU and packed, this code then
# $bench/before's; the new GPU test with every GPU visible; pytest -m gpu on GPU 0.
set -x
repo=$PWD; top=/tmp/x30; mkdir -p $top
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1 GRIDBENCH_TEST_DATA_DIR=$repo/.data
mkdir -p /tmp/keep && cp -r $repo/.data $repo/.bench /tmp/keep/
data=/tmp/keep/.data; bench=/tmp/keep/.bench
{ echo "code: $(cat $bench/commit.txt) (the working tree sent; the device copy's git HEAD is stale); before: $(cat $bench/before/REV)"; date -u; } > $top/provenance.txt
step() { date -u +"$1 %T" >> $top/progress.txt; touch $top/$1.done; }
step start
out=$top/scale; mkdir -p $out
( source benchmarks/gpu_call_common.sh
  grid=(--grid hidden_units=256,512,1024,2048)
  sc() { local name=$1; shift; timed "$name" python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "sqlite:///$work/$name.db" "${grid[@]}" --out "$work/$name" "$@"; cp "$work/$name/scale.json" "$out/$name.json"; python3 $repo/benchmarks/trial_walls.py "$out/$name.txt" > "$out/$name-walls.txt" 2>&1; python3 $repo/benchmarks/first_trials.py "sqlite:///$work/$name.db" > "$out/$name-first.txt" 2>&1; python3 $repo/benchmarks/search_ends.py "sqlite:///$work/$name.db" > "$out/$name-ends.txt" 2>&1; }
  sc b-on --gpus 1,4 --set epochs=10 --prestart-workers
  sc c-on --gpus 1,4 --set epochs=10 --prestart-workers --gpus-per-trial 0.25
  step packing
  ( export PYTHONPATH="$bench/before:$PYTHONPATH"; sc b-before --gpus 4 --set epochs=10 --prestart-workers; sc c-before --gpus 4 --set epochs=10 --prestart-workers --gpus-per-trial 0.25 )
  step packing-before
  rm -rf $work )
timeout 200 python3 -m pytest tests/test_gpu.py -k each_gpu_has_its_node -rs -v -p no:cacheprovider > $top/pytest-nodes.txt 2>&1
echo "pytest rc $?" >> $top/pytest-nodes.txt
step nodes-test
export CUDA_VISIBLE_DEVICES=0
timeout 330 python3 -m pytest -m gpu --ignore tests/test_docs.py -rs -v -p no:cacheprovider > $top/pytest-gpu.txt 2>&1
echo "pytest rc $?" >> $top/pytest-gpu.txt
step ALL
