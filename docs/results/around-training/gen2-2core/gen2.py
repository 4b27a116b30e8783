"""The cost of a full cyclic collection in a process like benchmarks/program_ready.py's child: plain, or with
gridbench's worker start-up handling (the collector paused over the imports, then collected and frozen).

    python gen2.py plain|worker MNIST_NPZ
"""

import gc
import json
import os
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
worker = sys.argv[1] == "worker"
from gridbench import collector  # noqa: E402

if worker:
    collector.pause_for_startup()  # before the imports, as a trial's worker does
import jax  # noqa: E402, F401  (imported first, as the child imports it)

from gridbench.datasets import DataSource  # noqa: E402
from gridbench.datasets.trial_data import load  # noqa: E402
from gridbench.trial.keras_import import import_keras  # noqa: E402
from gridbench.workloads import WORKLOADS, keras_mlp  # noqa: E402

import_keras()
if worker:
    collector.resume_after_startup()
data = load(DataSource("mnist", sys.argv[2]), 0)
hp = {hp.name: hp.default for hp in WORKLOADS["mlp"].hyperparameters}
hp.update(epochs=2, train_loop="compiled", hidden_units=512, batch_size=128, optimizer="rmsprop")
session = keras_mlp.open_session(hp, data, seed=0)
session.build()
session.sync()
times = []
for _ in range(3):
    start = time.perf_counter()
    gc.collect(2)
    times.append(time.perf_counter() - start)
tracked, frozen = len(gc.get_objects()), gc.get_freeze_count()
print(json.dumps({"side": sys.argv[1], "tracked": tracked, "frozen": frozen, "full_collection_s": times}))
