"""`python train_families.py ASKED`: each model through its loops, one trial each, in this process; prints one JSON
line of what each trial said, by model and loop (test_families).

ASKED is JSON: {"backend": ..., "data_dir": ..., "datasets": {model: dataset}, "loops": {model: [loop, ...]},
"small": {model: {hyperparameter: value}}, "sizes": bool}. The backend is the process's (KERAS_BACKEND, set by the
caller). With "sizes", a JSON line of model_sizes.py's sizes comes first: built in this process, whose Keras is
imported already, instead of a process of its own.
"""

import json
import sys

from model_sizes import sizes

from gridbench.datasets import find
from gridbench.trial import TrialContext, run_trial
from gridbench.workloads import WORKLOADS


def train(asked: dict) -> dict:
    rows = {}
    for name, dataset in asked["datasets"].items():
        dataset = "digits" if dataset == "mnist" else dataset
        params = {hp.name: hp.default for hp in WORKLOADS[name].hyperparameters}
        params.update(asked["small"].get(name, {}), epochs=3, batch_size=16, precision="mixed_bfloat16")
        source = find.locate(dataset, asked["data_dir"])
        loops = {}
        for loop in asked["loops"][name]:
            context = TrialContext(
                name, {**params, "train_loop": loop}, source, "cpu", asked["backend"], cpus=2, seed=0
            )
            out = run_trial({}, context).to_dict()
            tags = out["tags"]
            loops[loop] = [
                out["status"], out.get("error"), tags.get("device.actual"), tags.get("precision"),
                tags.get("lstm.cudnn"), out["metrics"].get("test_accuracy"), len(out.get("epoch_times", [])),
                tags.get("backend"),
            ]  # fmt: skip
        rows[name] = loops
    return rows


if __name__ == "__main__":
    asked = json.loads(sys.argv[1])
    if asked.get("sizes"):
        print(json.dumps({"sizes": sizes()}))
    print(json.dumps(train(asked)))
