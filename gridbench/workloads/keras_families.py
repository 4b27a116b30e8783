"""The seeds' benchmark models as Keras builders: CNNs, a ResNet, LSTMs and fastText.

Each follows the Keras example the published CPU-versus-GPU benchmarks ran (Max
Woolf's suite, the CIFAR-10 ResNet, the small CIFAR-10 CNN), with the sizes those
examples used as defaults and the interesting ones as hyperparameters. Two-class
outputs (IMDb) use a two-way softmax rather than one sigmoid, so that every family
trains with the same loss; the cost is one extra output unit.

A builder takes (hyperparameters, sample shape, number of classes) and returns an
uncompiled model whose last layer computes in float32, as mixed precision wants.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import keras
from keras import layers, ops

from gridbench.workloads.keras_layers import TunableDropout

Builder = Callable[[Mapping[str, Any], tuple, int], keras.Model]


def _softmax(classes: int) -> layers.Layer:
    # float32 under mixed precision too: a float16 softmax over-/underflows.
    return layers.Dense(classes, activation="softmax", dtype="float32")


def mnist_cnn(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """Keras' mnist_cnn example: two 3x3 convolutions, max pooling, one dense layer."""
    filters = int(hp["filters"])
    return keras.Sequential(
        [
            keras.Input(shape=shape),
            layers.Conv2D(filters, 3, activation="relu"),
            layers.Conv2D(2 * filters, 3, activation="relu"),
            layers.MaxPooling2D(2),
            TunableDropout(hp["dropout"]),
            layers.Flatten(),
            layers.Dense(int(hp["dense_units"]), activation="relu"),
            layers.Dropout(0.5),
            _softmax(classes),
        ],
        name="mnist_cnn",
    )


def vgg_cnn(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """Keras' cifar10_cnn example (VGG-like): two blocks of two 3x3 convolutions, then dense."""
    filters = int(hp["filters"])
    stack: list = [keras.Input(shape=shape)]
    for width in (filters, 2 * filters):
        stack += [
            layers.Conv2D(width, 3, padding="same", activation="relu"),
            layers.Conv2D(width, 3, activation="relu"),
            layers.MaxPooling2D(2),
            TunableDropout(hp["dropout"]),
        ]
    stack += [
        layers.Flatten(),
        layers.Dense(int(hp["dense_units"]), activation="relu"),
        layers.Dropout(0.5),
        _softmax(classes),
    ]
    return keras.Sequential(stack, name="cifar10_cnn")


def resnet_blocks(depth: int) -> int:
    """Residual blocks per stage of a CIFAR ResNet v1 of `depth` layers (He et al. 2016: depth = 6n + 2)."""
    return (depth - 2) // 6


def resnet(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """ResNet v1 for CIFAR-10 as in Keras' cifar10_resnet example: three stages of n basic blocks.

    `depth` counts the main path's layers with weights (6n convolutions, the first
    convolution and the classifier); the two 1x1 projection shortcuts come on top.
    """
    blocks = resnet_blocks(int(hp["depth"]))
    filters = int(hp["filters"])

    def conv_bn(x, width, strides=1, activation=True):
        x = layers.Conv2D(width, 3, strides=strides, padding="same", use_bias=False, kernel_initializer="he_normal")(x)
        x = layers.BatchNormalization()(x)
        return layers.Activation("relu")(x) if activation else x

    inputs = keras.Input(shape=shape)
    x = conv_bn(inputs, filters)
    for stage in range(3):
        width = filters * 2**stage
        for block in range(blocks):
            strides = 2 if stage > 0 and block == 0 else 1
            y = conv_bn(x, width, strides)
            y = conv_bn(y, width, activation=False)
            if strides != 1:
                x = layers.Conv2D(width, 1, strides=strides, padding="same", kernel_initializer="he_normal")(x)
            x = layers.Activation("relu")(layers.add([x, y]))
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, _softmax(classes)(x), name=f"resnet{hp['depth']}")


def small_cnn(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """A two-convolution CIFAR-10 CNN of exactly 39,558 parameters, the size of the seeds' small CNN.

    The seed gives only its convolution count and parameter count; these layer sizes
    are one network that matches both (tests/test_families.py checks the count).
    """
    return keras.Sequential(
        [
            keras.Input(shape=shape),
            layers.Conv2D(64, 5, padding="same", activation="relu"),
            layers.MaxPooling2D(4),
            layers.Conv2D(52, 3, activation="relu"),
            layers.MaxPooling2D(2),
            layers.Flatten(),
            TunableDropout(hp["dropout"]),
            _softmax(classes),
        ],
        name="small_cnn",
    )


def bidirectional_lstm(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """Keras' imdb_bidirectional_lstm example. The LSTMs keep cuDNN's conditions
    (tanh, sigmoid gates, no recurrent dropout, no masking, not unrolled), so that on a
    GPU Keras may run them as cuDNN kernels; gridbench records whether it did."""
    return keras.Sequential(
        [
            keras.Input(shape=shape, dtype="int32"),
            layers.Embedding(int(hp["vocab_size"]), int(hp["embedding_dim"])),
            layers.Bidirectional(layers.LSTM(int(hp["units"]))),
            TunableDropout(hp["dropout"]),
            _softmax(classes),
        ],
        name="imdb_bilstm",
    )


def fasttext(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """Keras' imdb_fasttext example (unigrams): an embedding averaged over the review."""
    return keras.Sequential(
        [
            keras.Input(shape=shape, dtype="int32"),
            layers.Embedding(int(hp["vocab_size"]), int(hp["embedding_dim"])),
            layers.GlobalAveragePooling1D(),
            _softmax(classes),
        ],
        name="imdb_fasttext",
    )


class OneHot(layers.Layer):
    """Character indices to one-hot vectors, inside the model (the example one-hot encodes on the host)."""

    def __init__(self, depth: int, **kwargs):
        super().__init__(**kwargs)
        self.depth = depth

    def call(self, inputs):
        return ops.one_hot(ops.cast(inputs, "int32"), self.depth, dtype=self.compute_dtype)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.depth)


def char_lstm(hp: Mapping[str, Any], shape: tuple, classes: int) -> keras.Model:
    """Keras' lstm_text_generation example: one LSTM over 40 one-hot characters, predicting the next."""
    return keras.Sequential(
        [
            keras.Input(shape=shape, dtype="int32"),
            OneHot(classes),
            layers.LSTM(int(hp["units"])),
            _softmax(classes),
        ],
        name="char_lstm",
    )


BUILDERS: dict[str, Builder] = {
    "cnn": mnist_cnn,
    "vgg": vgg_cnn,
    "resnet": resnet,
    "smallcnn": small_cnn,
    "bilstm": bidirectional_lstm,
    "fasttext": fasttext,
    "char_lstm": char_lstm,
}
