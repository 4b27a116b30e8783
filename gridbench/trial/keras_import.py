"""Keras' import in a trial's worker, without the scikit-learn that only Keras' own scikit-learn wrappers use.

Keras imports scikit-learn as it is imported, for keras.wrappers (SKLearnClassifier and the like), which no
trial uses: on an H100, py-spy sampled 1.03 s of scikit-learn in a worker's 3.05 s import of Keras
(docs/results/around-training.md). A worker imports Keras with scikit-learn hidden, then unhides it, so that a
trial's own modules (a kernel method, the digits data) import scikit-learn as usual. In such a worker, only
keras.wrappers is left without it: its estimators say that scikit-learn is missing.
"""

from __future__ import annotations

import sys

from gridbench.workloads import Workload


def import_for(workload: Workload) -> bool:
    """Imports Keras as below for a Keras workload (not a kernel method); True if scikit-learn was hidden."""
    return workload.framework == "keras" and import_keras()


def import_keras() -> bool:
    """Imports Keras, with scikit-learn hidden from it if nothing has imported either yet; True if hidden."""
    if "keras" in sys.modules or "sklearn" in sys.modules:
        return False
    sys.modules["sklearn"] = None  # type: ignore[assignment]  # `import sklearn` raises ImportError: Keras goes on
    try:
        import keras  # noqa: F401
    finally:
        if "sklearn" in sys.modules and sys.modules["sklearn"] is None:
            del sys.modules["sklearn"]
    return True
