"""One grid searched at several GPU or core counts (run.py), and the scaling table and curve (report.py)."""

from gridbench.scale.scale_runner import ScaleRequest, ScaleResult, parse_counts, plan_scale, run_scale

__all__ = ["ScaleRequest", "ScaleResult", "parse_counts", "plan_scale", "run_scale"]
