#!/usr/bin/env bash
# One job on one GPU, no Ray (Keras and the rest of the kit installed into /tmp/site by the call before): the MLP's
# program from the cache in fresh processes (benchmarks/program_ready.py --programs mlp), each window's CPU seconds,
# faults, switches and cyclic collections reported, with e00433e's gridbench/ (.bench/before: `git archive e00433e
# gridbench experiments`), whose load let the collector run, and with this checkout's (c05027d), whose load holds it
# (gridbench.collector.held): two rounds, the sides in turn, 5 fresh processes a side a round, each side filling a
# compile cache of its own each round. Each side starts from a folder of its own: `python -c` puts the current
# directory first on sys.path.
set -x
top=/tmp/x81; mkdir -p $top
repo=/tmp/r81; rm -rf $repo; mkdir -p $repo && cp -r "$PWD"/. $repo/ && rm -rf $repo/.devkit && cd $repo
export KERAS_BACKEND=jax PYTHONUNBUFFERED=1
data=$repo/.data; bench=$repo/.bench
{ echo "code: $(cat $bench/commit.txt) (the working tree sent); before: e00433e's gridbench/ in $bench/before"; date -u; } > $top/provenance.txt
{ nvidia-smi -L; nproc; lscpu | grep -i "model name"; uptime; python3 --version; PYTHONPATH=/tmp/site python3 -c "import jax, keras; print('jax', jax.__version__, 'keras', keras.__version__)"; } > $top/env.txt 2>&1
step() { date -u +"$1 %T" >> $top/progress.txt; touch $top/$1.done; }
step start
mkdir -p /tmp/ready-cwd
for round in 1 2; do
  for side in before after; do
    code=$repo; [ $side = before ] && code=$bench/before
    (cd /tmp/ready-cwd && PYTHONPATH=$code:/tmp/site python3 -c "import gridbench; print('$side imports', gridbench.__file__)" \
      && PYTHONPATH=$code:/tmp/site python3 $repo/benchmarks/program_ready.py --data $data/mnist.npz --settings saved \
      --programs mlp --repeats 5 --json $top/ready-$side-$round.json) > $top/ready-$side-$round.txt 2>&1
    step $side-$round
  done
done
step ALL
