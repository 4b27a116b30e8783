"""`python gpu_lstm_and_cnn.py DATA_DIR`: a bidirectional LSTM and the CNN, one trial each on GPU 0 through the
compiled loop on JAX; prints one JSON line of their status, error, device and cuDNN tag (test_families, gpu)."""

import json
import sys

from gridbench.datasets import find
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS

SMALL_LSTM = {"vocab_size": 600, "maxlen": 40, "units": 8}


def train(data_dir: str) -> dict:
    rows = {}
    for name, dataset, extra in (("bilstm", "imdb", SMALL_LSTM), ("cnn", "digits", {})):
        params = {hp.name: hp.default for hp in WORKLOADS[name].hyperparameters}
        params.update(extra, epochs=2, batch_size=16, train_loop="compiled")
        source = find.locate(dataset, data_dir)
        context = TrialContext(name, params, source, "gpu", "jax", cpus=4, seed=0, gpus_per_trial=1.0)
        out = run_trial({}, context).to_dict()
        tags = out["tags"]
        rows[name] = [out["status"], out.get("error"), tags.get("device.actual"), tags.get("lstm.cudnn")]
    return rows


if __name__ == "__main__":
    print(json.dumps(train(sys.argv[1])))
