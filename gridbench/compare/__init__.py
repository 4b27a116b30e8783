"""Comparing searches read back from the store: pairing, statistics, prices, and the report."""

from gridbench.api import compare as _api_compare
from gridbench.api import make_package_callable
from gridbench.compare.pairing import Comparison, compare
from gridbench.compare.prices import PriceTable

__all__ = ["Comparison", "PriceTable", "compare"]

# gridbench.compare(...) is the Python API's compare (gridbench.api.compare).
make_package_callable(__name__, _api_compare)
