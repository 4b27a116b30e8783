"""Comparing searches read back from the store: pairing, statistics, prices, and the report."""

from gridbench.comparison.pairing import Comparison, compare
from gridbench.comparison.prices import PriceTable

__all__ = ["Comparison", "PriceTable", "compare"]
