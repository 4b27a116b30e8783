"""`python fused_and_alone.py MODELS`: for each of MODELS (comma-separated: mlp, cnn), four configurations trained
fused (one program for all four), then each alone, in this process on JAX; prints one JSON line of a report per
model: each member's loss and accuracy both ways, the epochs, device, loop and samples (test_fused)."""

import json
import sys

from gridbench import datasets
from gridbench.datasets import trial_data
from gridbench.trial.timing import PhaseClock
from gridbench.workloads import get_workload, keras_mlp, keras_model

SMALL = {"mlp": {"hidden_units": 32, "hidden_layers": 1}, "cnn": {"filters": 4, "dense_units": 16}}


def report(model: str) -> dict:
    workload = get_workload(model, "test")
    entry = keras_mlp if model == "mlp" else keras_model.CNN
    data = trial_data.load(datasets.DataSource("digits"), seed=0, flat=workload.flat_inputs)
    base = {hp.name: hp.default for hp in workload.hyperparameters}
    base.update(epochs=3, batch_size=32, train_loop="compiled", optimizer="adam")
    base.update(SMALL[model])
    members = [dict(base, dropout=d, learning_rate=lr) for d in (0.0, 0.3) for lr in (0.001, 0.01)]
    seeds = [0, 1, 0, 1]  # repeat 0 and 1 of a seed-0 spec
    fused = entry.open_fused_session(members, data, seeds)
    fused.build()
    clock = PhaseClock(sync=fused.sync)
    rows = [{"fused": [f["train_loss"], e["test_accuracy"]]} for f, e in zip(fused.fit(clock), fused.evaluate())]
    for row, member, seed in zip(rows, members, seeds):
        alone = entry.open_session(member, data, seed=seed)
        alone.build()
        row["alone"] = [alone.fit(PhaseClock(sync=alone.sync))["train_loss"], alone.evaluate()["test_accuracy"]]
    return {
        "rows": rows,
        "epochs": len(clock.epochs),
        "device": fused.actual_device(),
        "loop": fused.facts()["train_loop"],
        "samples": fused.train_samples,
    }


if __name__ == "__main__":
    print(json.dumps({model: report(model) for model in sys.argv[1].split(",")}))
