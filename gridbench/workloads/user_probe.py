"""The driver's check of a user's model and data, in a subprocess (`python -m gridbench.workloads.user_probe`).

The driver must not import a framework itself: TensorFlow or JAX would take GPU memory
that the trials need, and their start-up logs would come before a user error's one line.
Here, on the CPU, the data is read and checked, and the builder is imported, called
for each distinct configuration of the user's hyperparameters and run on two samples:
its output must be one probability per class. The request arrives on stdin
(cloudpickle: a builder defined in a notebook travels by value); one JSON line leaves
on stdout: {"error": "..."} or the data's facts and the model's parameter count.
"""

from __future__ import annotations

import json
import sys
from dataclasses import asdict
from types import MappingProxyType


def _check(request: dict) -> dict:
    import numpy as np

    from gridbench.datasets import user_data
    from gridbench.errors import UserError

    facts = None
    sample, num_classes = request.get("sample"), request.get("num_classes")
    if request.get("data") is not None:
        data = request["data"]
        arrays = user_data.load_arrays(data)
        facts = user_data.inspect(arrays, f"dataset {data.description}")
        sample, num_classes = user_data.read_inputs(arrays["x_train"][:2]), facts.num_classes

    import keras

    from gridbench.workloads.keras_user import resolve_builder

    reference = request["reference"]
    builder = resolve_builder(request["model_builder"])
    parameters = None
    for config in request["configs"]:
        shown = ", ".join(f"{k}={v!r}" for k, v in sorted(config.items()) if k in request["declared"]) or "defaults"
        try:
            model = builder(MappingProxyType(dict(config)))
        except Exception as err:
            raise UserError(f"model {reference} raised {type(err).__name__} at {shown}: {_first_line(err)}") from None
        if not isinstance(model, keras.Model):
            raise UserError(
                f"model {reference} returned a {type(model).__name__} at {shown}, not a keras.Model; "
                f"return the (uncompiled) model"
            )
        try:
            output = np.asarray(keras.ops.convert_to_numpy(model(sample, training=False)))
        except Exception as err:
            raise UserError(
                f"model {reference} cannot take the data's samples of shape {list(np.shape(sample)[1:])} "
                f"({type(err).__name__}: {_first_line(err)}); match its Input to the data"
            ) from None
        if output.ndim != 2 or output.shape[-1] != num_classes:
            raise UserError(
                f"model {reference} outputs {list(output.shape[1:])} per sample at {shown}, but the labels "
                f"name {num_classes} classes; end it with Dense({num_classes}, activation='softmax')"
            )
        if not (np.all(output >= -1e-6) and np.allclose(output.sum(axis=-1), 1.0, atol=1e-3)):
            raise UserError(
                f"model {reference}'s outputs are not class probabilities (rows do not sum to 1); gridbench trains "
                f"with sparse categorical cross-entropy: end the model with a softmax"
            )
        parameters = int(model.count_params())
    return {"facts": asdict(facts) if facts else None, "parameters": parameters}


def _first_line(err: Exception) -> str:
    return str(err).splitlines()[0][:300] if str(err) else "(no message)"


def main() -> None:
    import cloudpickle

    from gridbench.errors import UserError

    try:
        result = _check(cloudpickle.loads(sys.stdin.buffer.read()))
    except UserError as err:
        result = {"error": str(err)}
    sys.stdout.write("\n" + json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
