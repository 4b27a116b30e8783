"""A user's model module, as test_user_model copies it into a folder of its own (my_models.py): a good model
function, and one of each kind of bad one: four features in, three classes out."""

import keras


def build(hp):
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(hp["units"], activation="relu"),
            keras.layers.Dense(3, activation="softmax"),
        ]
    )


def logits(hp):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])


def raises(hp):
    raise ValueError("no such layer size")


def not_a_model(hp):
    return "a model"


def four_units(hp):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, activation="softmax")])


NOT_CALLABLE = 3
