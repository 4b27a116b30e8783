#!/usr/bin/env bash
# One call, no Ray: where a saved program's load goes on a GPU. OUT is where results go.
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH=$PWD:/tmp/site KERAS_BACKEND=jax
T0=$(date +%s.%N); stamp() { echo "[$(python3 -c "print(f'{$(date +%s.%N)-$T0:.1f}')") s] $*"; }
stamp install
python3 -m pip install -q --no-index --no-deps --target /tmp/site .devkit/mini/*.whl .devkit/spy/*.whl 2>&1 | grep -v "already exists" | tail -3
{ nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw --format=csv; lscpu; uptime; python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"; cat .bench/commit.txt; } > $OUT/host.txt 2>&1
stamp ready-default
python3 benchmarks/program_ready.py --repeats 5 --settings saved --json $OUT/ready.json > $OUT/ready.txt 2>$OUT/ready.err
CACHES=$(ls -d /tmp/gridbench-ready-*-saved-*)
stamp load-parts
python3 benchmarks/load_parts.py 10 $CACHES > $OUT/load_parts.txt 2>&1
stamp vlog
TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE=gpu_aot_compilation_result=1,gpu_executable=3,pjrt_stream_executor_client=3,se_gpu_pjrt_client=3,gpu_compiler=2,cuda_executor=2,stream_executor_executable=2 \
  python3 benchmarks/load_parts.py 3 $CACHES --marks > $OUT/load_parts_vlog.txt 2> $OUT/vlog.txt
stamp eager
CUDA_MODULE_LOADING=EAGER python3 benchmarks/load_parts.py 5 $CACHES > $OUT/load_parts_eager.txt 2>&1
stamp xla-trace
python3 .bench/xla_trace.py 3 /tmp/trace61 $CACHES > $OUT/xla_trace.txt 2>&1
stamp py-spy
timeout 150 /tmp/site/bin/py-spy record --native -r 250 -f raw -o $OUT/spy_native.txt -- python3 benchmarks/load_parts.py 5 $CACHES > $OUT/load_parts_spy.txt 2>&1
echo "py-spy rc $?" >> $OUT/load_parts_spy.txt
stamp pytest-saved
timeout 240 python3 -m pytest -q -m gpu tests/test_saved_programs.py -p no:cacheprovider > $OUT/pytest-saved.txt 2>&1
echo "pytest rc $?" >> $OUT/pytest-saved.txt
stamp done
