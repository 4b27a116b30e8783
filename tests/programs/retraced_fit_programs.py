"""`python retraced_fit_programs.py BACKEND`: Keras fit in one process (one worker) for the MLP and the CNN: trial
a, trial b (a kept program), and b again as a new worker would train it; prints one JSON line per trial, with the
number of times Keras traced its train step meanwhile (test_workloads)."""

import json
import sys

import keras

from gridbench.datasets import find
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS
from gridbench.workloads.programs import PROGRAMS

CONFIGS = {"a": {"learning_rate": 0.003, "dropout": 0.1}, "b": {"learning_rate": 0.001, "dropout": 0.3}}
traces = [0]
_train_step = keras.Model.train_step


def counted(self, *args, **kwargs):  # Keras calls it only while tracing its jit- or tf.function-compiled step
    traces[0] += 1
    return _train_step(self, *args, **kwargs)


if __name__ == "__main__":
    keras.Model.train_step = counted
    for name in ("mlp", "cnn"):  # SciKeras' estimator, and a family's KerasFitSession
        params = {hp.name: hp.default for hp in WORKLOADS[name].hyperparameters}
        small = dict(hidden_units=32, filters=8, dense_units=16)
        params.update(epochs=2, batch_size=64, train_loop="fit", optimizer="adam", **small)
        context = TrialContext(name, params, find.locate("digits"), "cpu", sys.argv[1], cpus=2, seed=0)
        for trial in ("a", "b", "fresh b"):
            if trial == "fresh b":
                PROGRAMS.clear()  # as a new worker: nothing kept
            before = traces[0]
            out = run_trial(CONFIGS[trial[-1]], context).to_dict()
            metrics = out["metrics"]
            print(
                json.dumps(
                    [
                        name,
                        trial,
                        out["status"],
                        out["tags"].get("program.reused"),
                        traces[0] - before,
                        "compile_s" in metrics,
                        metrics.get("warmup_epoch_s"),
                        metrics.get("test_accuracy"),
                        metrics.get("train_loss"),
                    ]
                )
            )
