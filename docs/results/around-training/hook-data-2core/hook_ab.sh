# The setup hook in fresh processes, with the plan's data (mnist) and without, alternately (a record of the
# 2026-11-28 run on 2 cores: its paths are that machine's). tests/programs/import_ahead.py, as 6351455 wrote it, deleted the
# data file after the hook (it now moves it aside and back), so each run read a copy.
cd /tmp/hookab
for i in 1 2 3 4 5 6; do
  for mode in none data; do
    python - "$mode" <<'PY'
import json, sys
mode = sys.argv[1]
plan = {"backend": "jax", "device": "cpu", "cpus": 1, "gpus_per_trial": 0.0,
        "modules": ["gridbench.gridsearch.tuning", "ray.tune.trainable.function_trainable", "gridbench.workloads.keras_mlp"], "keras": True,
        "data": {"name": "mnist", "path": "/tmp/hookab/mnist.npz", "seed": 0, "flat": True} if mode == "data" else None}
json.dump(plan, open(f"plan-{mode}.json", "w"))
PY
    cp /work/main/.data/mnist.npz /tmp/hookab/mnist.npz; chmod u+w /tmp/hookab/mnist.npz; PYTHONPATH=/work/main python /work/main/tests/programs/import_ahead.py plan-$mode.json 2>/dev/null | grep AHEAD | python -c "
import json,sys; d=json.loads(sys.stdin.read()[6:]); m=d['first'][1]; print('$mode', round(m['worker.import_ahead_s'],3), d.get('trial_data_report'))"
  done
done
