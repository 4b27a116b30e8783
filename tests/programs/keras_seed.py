"""A fresh JAX process seeds Keras (gridbench.workloads.keras_common.set_random_seed, or Keras' own with `keras`),
builds a Dense layer and prints `FOUND {json}`: whether TensorFlow was imported, the layer's first weights, NumPy's
next draw, and whether TensorFlow is still found by Keras afterwards. For tests/test_keras_import.py."""

import json
import os
import sys

os.environ["KERAS_BACKEND"] = "jax"
os.environ["JAX_PLATFORMS"] = "cpu"

import keras  # noqa: E402
import numpy as np  # noqa: E402

from gridbench.workloads.keras_common import set_random_seed  # noqa: E402

(keras.utils.set_random_seed if sys.argv[1:] == ["keras"] else set_random_seed)(7)
imported = sys.modules.get("tensorflow") is not None
layer = keras.layers.Dense(4)
layer.build((None, 3))
found = {
    "tensorflow_imported": imported,
    "weights": [float(v) for v in np.asarray(layer.kernel).ravel()[:4]],
    "numpy_draw": float(np.random.rand()),
}
if sys.argv[1:] != ["keras"]:
    from keras.src.utils import module_utils  # what Keras' own checks read

    found["tensorflow_found_later"] = module_utils.tensorflow.available
print("FOUND " + json.dumps(found), flush=True)
