"""`python light_api.py`: `import gridbench` imports no numpy, Ray, Keras or MLflow; search and compare stay plain
functions beside the gridsearch and comparison packages; a bad search() is a UserError, printed as `ERR ...`
(test_user_model)."""

import sys
import types

import gridbench

if __name__ == "__main__":
    heavy = [m for m in ("numpy", "ray", "keras", "mlflow") if m in sys.modules]
    assert not heavy, heavy
    import gridbench.comparison.pairing
    import gridbench.gridsearch.plan
    from gridbench import compare, search

    assert callable(gridbench.search) and callable(gridbench.compare)
    assert isinstance(search, types.FunctionType) and isinstance(compare, types.FunctionType)
    assert search is gridbench.api.search and compare is gridbench.api.compare
    assert gridbench.gridsearch.plan_search
    assert set(gridbench.__all__) >= {"search", "compare", "Spec", "load_spec", "UserError"}
    try:
        gridbench.search(42)
    except gridbench.UserError as err:
        print("ERR", err)
