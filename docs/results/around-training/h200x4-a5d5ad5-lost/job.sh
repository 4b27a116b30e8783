#!/usr/bin/env bash
# One device call's job (4 GPUs): after a 10-epoch fill, scale over 1, 2 and 4 GPUs at 300 epochs with
# --prestart-workers (a-on), and over 1 and 4 without it (a-off); each worker's first trial's parts from the store
# (benchmarks/first_trials.py); then the 10-epoch grid one trial per GPU and 4 per GPU, both with the option.
set -x
repo=$PWD; top=/tmp/x6; mkdir -p $top
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{ echo "code: $(cat .bench/commit.txt) (the working tree sent; the device copy's git HEAD is stale)"; date -u; } > $top/provenance.txt
{ set -x; nvidia-smi -L; nproc; python3 --version; python3 -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda.*|keras|ray|mlflow|numpy) "; } > $top/env.txt 2>&1
out=$top/scale; data=$repo/.data; mkdir -p $out
source benchmarks/gpu_call_common.sh
grid=(--grid hidden_units=256,512,1024,2048)
sc() { local name=$1; shift; timed "$name" python3 -m gridbench scale mnist --backend jax --data-dir "$data" --tracking-uri "sqlite:///$work/$name.db" "${grid[@]}" --out "$work/$name" "$@"; cp "$work/$name/scale.json" "$out/$name.json"; python3 $repo/benchmarks/trial_walls.py "$out/$name.txt" > "$out/$name-walls.txt" 2>&1; python3 $repo/benchmarks/first_trials.py "sqlite:///$work/$name.db" > "$out/$name-first.txt" 2>&1; touch $top/$name.done; }
sc fill --gpus 1 --set epochs=10
sc a-on --gpus 1,2,4 --set epochs=300 --prestart-workers
sc a-off --gpus 1,4 --set epochs=300 --no-prestart-workers
sc b-on --gpus 1,2,4 --set epochs=10 --prestart-workers
sc c-on --gpus 1,2,4 --set epochs=10 --prestart-workers --gpus-per-trial 0.25
rm -rf $work; touch $top/ALL_DONE
