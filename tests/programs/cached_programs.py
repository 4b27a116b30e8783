"""`python cached_programs.py CACHE_DIR`: one MLP trial through the compiled loop and one through fit, with JAX's
persistent compile cache in CACHE_DIR, in this process; prints one JSON line per trial (test_workloads runs it
twice: an earlier search's worker, then a later one's)."""

import json
import sys

from gridbench.datasets import find
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS

if __name__ == "__main__":
    params = {hp.name: hp.default for hp in WORKLOADS["mlp"].hyperparameters}
    params.update(epochs=2, batch_size=32, optimizer="adam", hidden_units=32)
    data = find.locate("digits")
    for loop in ("compiled", "fit"):
        context = TrialContext(
            "mlp", {**params, "train_loop": loop}, data, "cpu", "jax", cpus=2, seed=0, compile_cache_dir=sys.argv[1]
        )
        out = run_trial({"learning_rate": 0.003, "dropout": 0.1}, context).to_dict()
        metrics, tags = out["metrics"], out["tags"]
        print(
            json.dumps(
                [
                    loop,
                    out["status"],
                    tags.get("program.reused"),
                    tags.get("program.cached"),
                    metrics.get("warmup_epoch_s"),
                    metrics.get("compile_s"),
                    metrics.get("test_accuracy"),
                    metrics.get("train_loss"),
                ]
            )
        )
