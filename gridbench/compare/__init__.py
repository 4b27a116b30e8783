"""Comparing searches read back from the store: pairing, statistics, prices, and the report."""

from gridbench.compare.pairing import Comparison, compare
from gridbench.compare.prices import PriceTable

__all__ = ["Comparison", "PriceTable", "compare"]
