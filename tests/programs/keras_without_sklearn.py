"""`python keras_without_sklearn.py [sklearn-first]`: gridbench.trial.keras_import (scikit-learn, matplotlib and pandas
hidden) as a trial's worker runs it, then what the process finds, as one line `FOUND {json}` (test_keras_import)."""

import json
import sys

if __name__ == "__main__":
    if sys.argv[1:] == ["sklearn-first"]:
        import sklearn  # noqa: F401 - something of the trial's imported it first

    from gridbench.trial import keras_import

    found = {
        "hidden": list(keras_import.import_keras()),
        "sklearn_after_keras": "sklearn" in sys.modules,
        "matplotlib_after_keras": "matplotlib" in sys.modules,
        "pandas_after_keras": "pandas" in sys.modules,
    }
    import keras
    import numpy as np

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    found["keras_works"] = model(np.zeros((1, 4))).shape == (1, 2)
    from sklearn.base import BaseEstimator  # a trial's own modules import it as usual afterwards

    found["sklearn_later"] = BaseEstimator.__module__
    from keras.wrappers import SKLearnClassifier

    try:
        SKLearnClassifier(model=None)
        found["wrapper"] = "works"
    except ImportError as err:
        found["wrapper"] = f"ImportError: {err}"
    import keras.visualization

    try:
        keras.visualization.plot_image_gallery(np.zeros((1, 4, 4, 3)))
        found["gallery"] = "works"
    except ImportError as err:
        found["gallery"] = f"ImportError: {err}"
    import matplotlib.pyplot as plt  # the same: a trial's own modules import it as usual afterwards

    found["pyplot_later"] = plt.__name__
    import pandas  # the same; and Keras, which did not see it, fits a DataFrame as any array

    frame = pandas.DataFrame(np.ones((8, 4), dtype="float32"))
    model.compile(optimizer="sgd", loss="mse")
    history = model.fit(frame, np.zeros((8, 2), dtype="float32"), epochs=1, verbose=0)
    found["pandas_later"] = pandas.DataFrame.__module__.split(".")[0]
    found["frame_fitted"] = len(history.history["loss"]) == 1
    print("FOUND " + json.dumps(found), flush=True)
