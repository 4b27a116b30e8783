"""A user's own experiment for gridbench: a small CNN and a loader of real offline data.

`build(hp)` gets the trial's hyperparameters (its own, declared in digits-cnn.toml, and
gridbench's) and returns an uncompiled Keras model that ends in a softmax; gridbench
compiles and trains it. `load()` returns scikit-learn's bundled 8x8 handwritten digits
at their full shape, (samples, 8, 8, 1), split 75/25 with every class in both halves.
"""

import keras
from keras import layers


def build(hp):
    return keras.Sequential(
        [
            keras.Input(shape=(8, 8, 1)),
            layers.Conv2D(hp["filters"], 3, padding="same", activation="relu"),
            layers.Conv2D(hp["filters"], 3, padding="same", activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            layers.Dense(hp["dense_units"], activation="relu"),
            layers.Dropout(hp["dropout_rate"]),
            layers.Dense(10, activation="softmax"),
        ],
        name="digits_cnn",
    )


def load():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")[..., None]  # pixel values are 0..16
    x_train, x_test, y_train, y_test = train_test_split(
        images, digits.target, test_size=0.25, stratify=digits.target, random_state=0
    )
    return x_train, y_train, x_test, y_test
