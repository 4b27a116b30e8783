"""Keras' import in a trial's worker, without the scikit-learn, matplotlib and pandas that no trial uses.

Keras imports scikit-learn as it is imported, for keras.wrappers (SKLearnClassifier and the like), matplotlib's
pyplot, for keras.visualization's image galleries, and pandas, to slice DataFrames in its data adapters; no trial
uses any of them (a trial's data are NumPy arrays). Without scikit-learn, Keras' import took a median of 2.38 s
against 3.74 s on 2 cores; on an H100 host, the headline's first trial took 2.98-3.45 s against 3.36-3.70 s
(docs/results/around-training.md). Hiding matplotlib as well took it to a median of 2.430 s against 2.921 s on 2
cores (docs/results/around-training/keras-import-2core-matplotlib.txt), and pandas as well to a median of 1.135 s
against 1.240 s, shorter in 9 of 10 pairs (keras-import-2core-pandas.txt). A worker imports Keras with the three
hidden, then unhides them, so that a trial's own modules (a kernel method, the digits data, a user's model) import
them as usual. In such a worker, only keras.wrappers and keras.visualization are left without them, and say that
scikit-learn or matplotlib is missing; Keras' data adapters take a DataFrame as any array (NumPy's asarray).
"""

from __future__ import annotations

import sys

from gridbench.workloads import Workload
from gridbench.workloads.hidden_imports import hidden

# Keras imports each inside `try: ... except ImportError`; only its wrappers, galleries and DataFrame slicing use them.
HIDDEN = ("sklearn", "matplotlib", "pandas")


def import_for(workload: Workload) -> tuple[str, ...]:
    """Imports Keras as below for a Keras workload (not a kernel method); returns what was hidden from it."""
    return import_keras() if workload.framework == "keras" else ()


def import_keras() -> tuple[str, ...]:
    """Imports Keras, hiding from it whichever of HIDDEN nothing has imported yet; returns those."""
    if "keras" in sys.modules:
        return ()
    with hidden(*HIDDEN) as hiding:
        import keras  # noqa: F401
    return hiding
