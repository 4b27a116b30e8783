"""Keras' import in a trial's worker, without the scikit-learn that only Keras' own scikit-learn wrappers use.

Keras imports scikit-learn as it is imported, for keras.wrappers (SKLearnClassifier and the like), which no
trial uses. Without it, Keras' import took a median of 2.38 s against 3.74 s on 2 cores; on an H100 host, the
headline's first trial took 2.98-3.45 s against 3.36-3.70 s (docs/results/around-training.md). A worker imports
Keras with scikit-learn hidden, then unhides it, so that a trial's own modules (a kernel method, the digits data)
import scikit-learn as usual. In such a worker, only keras.wrappers is left without it: its estimators say that
scikit-learn is missing.
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
