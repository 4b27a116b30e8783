"""The driver's side of a search: plan it, run it under Ray Tune, hear of each trial, record it.

plan.py (checks, backend, placement) -> run.py (Ray Tune) -> tune_callback.py -> gridbench.tracking
"""

from gridbench.api import make_package_callable
from gridbench.api import search as _api_search
from gridbench.search.plan import SearchOptions, SearchPlan, plan_pair, plan_search
from gridbench.search.run import SearchObserver, SearchResult, run_search

__all__ = ["SearchObserver", "SearchOptions", "SearchPlan", "SearchResult", "plan_pair", "plan_search", "run_search"]

# gridbench.search(...) is the Python API's search (gridbench.api.search).
make_package_callable(__name__, _api_search)
