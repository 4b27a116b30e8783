"""`python import_ahead.py PLAN_FILE`: Ray's setup hook (gridbench.trial.prestart.import_ahead) as a prestarted worker
runs it, then what a trial in this worker would find, as one line `AHEAD {json}` (test_prestart)."""

import json
import os
import sys

from gridbench.trial import prestart

if __name__ == "__main__":
    os.environ[prestart.PLAN_ENV] = sys.argv[1]
    prestart.import_ahead()
    named = (
        "keras",
        "sklearn",
        "pandas",
        "jax",
        "tensorflow",
        "torch",
        "gridbench.gridsearch.tuning",
        "gridbench.workloads.keras_mlp",
    )
    imported = sorted(module for module in named if module in sys.modules)
    found = {"imported": imported, "keras_backend_env": os.environ.get("KERAS_BACKEND")}
    if "keras" in sys.modules:
        import keras

        found["keras_backend"] = keras.backend.backend()
    if "jax" in sys.modules:
        from jax._src import xla_bridge

        found["jax_backend_started"] = xla_bridge.backends_are_initialized()  # a device must wait for Ray's lease
    first, later = prestart.ahead_of_trial(), prestart.ahead_of_trial()
    from gridbench.trial import steps

    found["trial_backend_report"] = steps.backend_started()  # what the worker's first trial would report of it
    found["trial_data_report"] = steps.data_read()  # its data: the read the hook began, waited for
    data = json.load(open(sys.argv[1])).get("data") if os.path.exists(sys.argv[1]) else None
    if data:
        from gridbench.datasets import DataSource
        from gridbench.trial.context import TrialContext

        away = data["path"] + ".away"
        os.replace(data["path"], away)  # a trial's read now finds the data only where the hook's read kept them
        # The trial's own read, as run_trial's setup makes it; its hyperparameters hold a `maxlen`, as a model's may
        try:
            source = DataSource(data["name"], data["path"])
            context = TrialContext("mlp", {}, source, "cpu", "jax", 1, data["seed"])
            read = steps.load_data(context, {"hidden_units": 256, "maxlen": 100})
            found["trial_data_shape"] = list(read.x_train.shape)
        except OSError:
            found["trial_data_shape"] = None
        finally:
            os.replace(away, data["path"])
    found.update({"first": first, "later": later})
    print("AHEAD " + json.dumps(found), flush=True)
