"""`python model_sizes.py`: the seeds' model sizes, built (not trained) in this process; prints one JSON line
(test_families): the small CNN's parameters, two ResNets' weight layers and ResNet-20's parameters."""

import json

from gridbench.workloads import WORKLOADS
from gridbench.workloads.keras_common import weight_layers
from gridbench.workloads.keras_families import BUILDERS
from gridbench.workloads.keras_layers import parameter_count


def defaults(name: str, **extra) -> dict:
    return {**{hp.name: hp.default for hp in WORKLOADS[name].hyperparameters}, **extra}


def sizes() -> dict[str, int]:
    small = BUILDERS["smallcnn"](defaults("smallcnn"), (32, 32, 3), 10)
    found = {"smallcnn": parameter_count(small)}
    for depth in (20, 62):
        model = BUILDERS["resnet"](defaults("resnet", depth=depth), (32, 32, 3), 10)
        found[f"resnet{depth}"] = weight_layers(model)
    found["resnet20_params"] = BUILDERS["resnet"](defaults("resnet"), (32, 32, 3), 10).count_params()
    return found


if __name__ == "__main__":
    print(json.dumps(sizes()))
