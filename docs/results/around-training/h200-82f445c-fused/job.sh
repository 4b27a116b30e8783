#!/usr/bin/env bash
# One job on one GPU, run detached and polled over device calls (docs/development.md), the Ray kit installed into
# /tmp/site by the calls before; this checkout's code (82f445c, the working tree sent): the 64-configuration grid one
# trial per configuration and fused (benchmarks/fused.py, twice: the second on the persistent cache), the hand-written
# pure-JAX floor in both modes (fused_floor.py: --mode fused twice on JAX's persistent cache, --mode trials with none),
# then 3 pairs of the fused floor and the fused grid, alternating (benchmarks/fixed_costs.sh fused jaxfloor fusedpairs),
# and benchmarks/targets_table.py over it.
set -x
top=/tmp/x92; mkdir -p $top
repo=/tmp/r92; rm -rf $repo; mkdir -p $repo && cp -r "$PWD"/. $repo/ && rm -rf $repo/.devkit && cd $repo
export PYTHONPATH=$repo:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
data=$repo/.data; bench=$repo/.bench
{ echo "code: $(cat $bench/commit.txt) (the working tree sent)"; date -u; } > $top/provenance.txt
{ nvidia-smi; nvidia-smi -L; nproc; lscpu | grep -i "model name"; uptime; python3 --version; python3 -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda.*|keras|ray|mlflow.*|cupy.*|numpy|scipy) "; python3 -c "import ray, mlflow, keras; print('ray', ray.__version__, 'mlflow', mlflow.__version__, 'keras', keras.__version__)"; } > $top/env.txt 2>&1
step() { date -u +"$1 %T" >> $top/progress.txt; touch $top/$1.done; }
step start
PAIRS=3 bash benchmarks/fixed_costs.sh $top/fused $data $bench fused jaxfloor fusedpairs > $top/fused.log 2>&1
step fused
for d in $top/*/work; do rm -rf $d; done
python3 benchmarks/targets_table.py $top > $top/targets.md 2>&1
step ALL
