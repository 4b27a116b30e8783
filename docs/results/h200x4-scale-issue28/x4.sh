#!/usr/bin/env bash
# Issue 28's runs over 1, 2 and 4 GPUs. Phase env: the machine; a: a compile-cache fill, then 300 epochs;
# bc: 10 epochs with programs cached, one trial per GPU and packed 4 per GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD:/tmp/site KERAS_BACKEND=jax
S="python3 -m gridbench scale mnist --backend jax --data-dir .data --grid hidden_units=256,512,1024,2048"
run() { local name=$1 budget=$2; shift 2; local t0=$(date +%s); mkdir -p $OUT/$name
  timeout $budget $S "$@" --out /tmp/$name > $OUT/$name/log.txt 2>&1; echo "rc $? wall $(( $(date +%s) - t0 )) s: $S $*" | tee -a $OUT/calls.txt
  cp /tmp/$name/scale.json $OUT/$name/ 2>/dev/null; }
case $1 in
env) { date -u; nvidia-smi -L; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; nvidia-smi topo -m
       nproc; free -g | head -2; python3 --version; } > $OUT/env.txt 2>&1 ;;
a) python3 -c "import jax, keras, ray, mlflow, numpy; print('jax', jax.__version__, 'keras', keras.__version__, 'ray', ray.__version__, 'mlflow', mlflow.__version__, 'numpy', numpy.__version__, jax.devices())" > $OUT/versions.txt 2>&1
   t0=$(date +%s); timeout 100 $S --gpus 1 --set epochs=10 > $OUT/fill.txt 2>&1; echo "rc $? wall $(( $(date +%s) - t0 )) s: fill: $S --gpus 1 --set epochs=10" | tee -a $OUT/calls.txt
   run a 440 --gpus 1,2,4 --set epochs=300 ;;
bc) run b 120 --gpus 1,2,4 --set epochs=10
    run c 120 --gpus 1,2,4 --set epochs=10 --gpus-per-trial 0.25 ;;
esac
