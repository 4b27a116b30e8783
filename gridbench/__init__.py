"""gridbench: how much faster, and how much cheaper, is a GPU for your hyperparameter search?

The Python API (gridbench.api): search, compare, Spec, load_spec, and UserError for any
input a user can fix (SearchStoppedError for a search something outside it stopped).
Importing gridbench stays light: what these names need (Ray, MLflow, a framework) is
imported when they are called.
"""

from gridbench.errors import SearchOutOfSpaceError, SearchStoppedError, UserError

__version__ = "0.1.0"

__all__ = [
    "ComparisonResult",
    "Search",
    "SearchOutOfSpaceError",
    "SearchStoppedError",
    "Spec",
    "UserError",
    "compare",
    "load_spec",
    "search",
]

_API = frozenset(__all__) - {"UserError", "SearchStoppedError", "SearchOutOfSpaceError"}


def __getattr__(name: str):
    # PEP 562: gridbench.search and the rest load gridbench.api on first use.
    if name in _API:
        from gridbench import api

        return getattr(api, name)
    raise AttributeError(f"module 'gridbench' has no attribute {name!r}")
