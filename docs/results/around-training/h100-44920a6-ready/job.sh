#!/usr/bin/env bash
# One call on one GPU, no Ray: a program's readiness from the compile cache (benchmarks/program_ready.py, the MLP and a
# fused group of 8, 5 fresh processes each), with XLA's defaults, then with Triton's GEMMs off (as the evaluation is
# compiled), then with the defaults again: is the epoch's load, which the nineteenth inferred to be mostly its Triton
# fusions compiled again, smaller without them? Each program_ready.py call fills a compile cache of its own.
set -x
out=${OUT:-/tmp/out58}; mkdir -p $out
python3 -m pip install -q --no-index --no-deps --no-cache-dir --target /tmp/site .devkit/mini/*.whl > $out/install.txt 2>&1
export PYTHONPATH=$PWD:/tmp/site KERAS_BACKEND=jax PYTHONUNBUFFERED=1
{ echo "code: $(cat .bench/commit.txt) (the working tree sent)"; date -u; } > $out/provenance.txt
{ nvidia-smi; nvidia-smi -L; nproc; python3 --version; python3 -m pip list 2>/dev/null | grep -iE "^(jax|jaxlib|jax-cuda.*|keras|numpy) "; } > $out/env.txt 2>&1
ready() {  # NAME [XLA_FLAGS]
  mkdir -p /tmp/ready58-$1
  TMPDIR=/tmp/ready58-$1 XLA_FLAGS=${2:-} python3 benchmarks/program_ready.py --data .data/mnist.npz --repeats ${REPEATS:-5} \
    --settings saved --json $out/ready-$1.json > $out/ready-$1.txt 2>&1
  date -u +"$1 %T" >> $out/progress.txt
}
date -u +"start %T" >> $out/progress.txt
ready default
ready no-triton-gemm --xla_gpu_enable_triton_gemm=false
[ -n "${AGAIN-1}" ] && ready default-again
