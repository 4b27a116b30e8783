"""Small files in the layouts keras.datasets caches, made by the tests themselves.

Labels are learnable (a class's samples share a pattern), so that a few epochs
on them show a model that trains, not only one that runs.
"""

from __future__ import annotations

import pickle

import numpy as np

from gridbench import datasets


def make_cifar10(directory, per_batch: int = 40, seed: int = 0):
    """cifar-10-batches-py/ with data_batch_1..5 and test_batch, as pickled by the CIFAR authors."""
    rng = np.random.default_rng(seed)
    folder = directory / datasets.CIFAR10_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name in datasets.CIFAR10_FILES:
        labels = rng.integers(0, 10, size=per_batch)
        # Rows of 3072 bytes, channel-major (R plane, G plane, B plane). Class k is a colour: plane k % 3 is
        # brightest (+160), and the other two planes, in order, carry k // 3 in two bits (+80 each where set),
        # so that every class differs from every other by 80 in some plane's mean: learnable in a few epochs.
        images = rng.integers(0, 90, size=(per_batch, 3, 1024), dtype=np.uint8)
        rows = np.arange(per_batch)
        images[rows, labels % 3] += np.uint8(160)
        for bit, offset in enumerate((1, 2)):
            lit = ((labels // 3) >> bit) & 1 == 1
            images[rows[lit], (labels[lit] + offset) % 3] += np.uint8(80)
        batch = {b"data": images.reshape(per_batch, 3072), b"labels": labels.tolist(), b"batch_label": name.encode()}
        with open(folder / name, "wb") as handle:
            pickle.dump(batch, handle)
    return folder


def make_imdb(directory, reviews: int = 64, seed: int = 0):
    """imdb.npz: ragged reviews of raw word indices (object arrays), labels 0/1; positive ones say word 7."""
    rng = np.random.default_rng(seed)

    def split():
        labels = rng.integers(0, 2, size=reviews)
        texts = []
        for label in labels:
            words = rng.integers(10, 500, size=rng.integers(5, 60)).tolist()
            if label:
                words[::3] = [7] * len(words[::3])
            texts.append(words)
        holder = np.empty(reviews, dtype=object)
        holder[:] = texts
        return holder, labels.astype(np.int64)

    x_train, y_train = split()
    x_test, y_test = split()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / datasets.IMDB_FILE
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    return path


def make_text(directory, repeats: int = 60):
    """nietzsche.txt: a short, repetitive text (next characters are predictable)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / datasets.NIETZSCHE_FILE
    path.write_text("Supposing that Truth is a woman--what then?\n" * repeats, encoding="utf-8")
    return path
