#!/usr/bin/env bash
# The headline as typed, without and with --prestart-workers, in alternating order, after one run that fills the
# compile cache (6351455: the hook starts the GPU and reads the data ahead).
set -x
repo=$PWD; out=/tmp/x24; mkdir -p $out
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1 CUDA_VISIBLE_DEVICES=0
mkdir -p /tmp/keep && cp -r $repo/.data $repo/.bench /tmp/keep/
data=/tmp/keep/.data; bench=/tmp/keep/.bench
{ echo "code: $(cat $bench/commit.txt)"; date -u; nvidia-smi -L; nproc; } > $out/provenance.txt 2>&1
source benchmarks/gpu_call_common.sh
timed fill python3 -m gridbench search mnist --device gpu --tracking-uri "$uri"
for i in $(seq 1 ${PAIRS:-8}); do
  order="no-prestart-workers prestart-workers"; [ $((i % 2)) = 0 ] && order="prestart-workers no-prestart-workers"
  for ahead in $order; do timed "headline-$ahead-$i" python3 -m gridbench search mnist --device gpu --tracking-uri "$uri" "--$ahead"; done
done
python3 $repo/benchmarks/first_trials.py "$uri" > $out/first.txt 2>&1
python3 $repo/benchmarks/search_ends.py "$uri" > $out/ends.txt 2>&1
rm -rf $work; touch $out/ALL.done
