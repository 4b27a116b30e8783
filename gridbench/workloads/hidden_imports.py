"""Modules made unimportable for a while, so that a framework's optional import of them fails fast and it goes on.

Keras imports scikit-learn, matplotlib and pandas as it is imported, and TensorFlow as it seeds, each where installed
and each inside `try: ... except ImportError` (gridbench.trial.keras_import, keras_common.set_random_seed).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def hidden(*names: str) -> Iterator[tuple[str, ...]]:
    """`import name` raises ImportError inside the block, for each of `names` that nothing has imported yet; yields
    those. Afterwards they import as usual."""
    hiding = tuple(name for name in names if name not in sys.modules)
    for name in hiding:
        sys.modules[name] = None  # type: ignore[assignment]  # how Python marks a module as not to be imported
    try:
        yield hiding
    finally:
        for name in hiding:
            if name in sys.modules and sys.modules[name] is None:
                del sys.modules[name]
