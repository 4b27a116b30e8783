"""The driver's side of a search: plan it, run it under Ray Tune, hear of each trial, record it.

plan.py (checks, backend, placement) -> run.py (Ray Tune) -> tune_callback.py -> gridbench.tracking
"""

from gridbench.gridsearch.plan import SearchOptions, SearchPlan, plan_pair, plan_search
from gridbench.gridsearch.search_runner import SearchObserver, SearchResult, run_search

__all__ = ["SearchObserver", "SearchOptions", "SearchPlan", "SearchResult", "plan_pair", "plan_search", "run_search"]
