"""`python reused_programs.py MODELS CONFIGS DEVICE`: for each model of MODELS (comma-separated), trials of the
configurations CONFIGS (a and b, comma-separated, in order) one after another in this one process, as a Ray
worker trains trial after trial, on JAX's compiled loop; prints one JSON line per trial (test_workloads)."""

import json
import sys

from gridbench.datasets import find
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS

CONFIGS = {"a": {"learning_rate": 0.003, "dropout": 0.1}, "b": {"learning_rate": 0.001, "dropout": 0.3}}

if __name__ == "__main__":
    models, configs, device = sys.argv[1].split(","), sys.argv[2].split(","), sys.argv[3]
    for name in models:
        params = {hp.name: hp.default for hp in WORKLOADS[name].hyperparameters}
        # Small models (the CNN's 8 and 16 filters, 16 dense units): what is checked is which trial compiled and
        # whether the numbers repeat bit for bit, not how well they learn (the CNN at Keras' 32 filters and 128 dense
        # units cost 6.6 CPU s more, 2 cores).
        small = dict(hidden_units=32, filters=8, dense_units=16)
        params.update(epochs=3, batch_size=32, train_loop="compiled", optimizer="adam", **small)
        gpus = 1.0 if device == "gpu" else 0.0
        context = TrialContext(name, params, find.locate("digits"), device, "jax", cpus=2, seed=0, gpus_per_trial=gpus)
        for config in configs:
            out = run_trial(CONFIGS[config], context).to_dict()
            metrics, tags = out["metrics"], out["tags"]
            row = [name, config, out["status"], tags.get("program.reused"), metrics.get("compile_s")]
            row += [metrics.get("test_accuracy"), metrics.get("train_loss"), tags.get("device.actual")]
            print(json.dumps(row))
