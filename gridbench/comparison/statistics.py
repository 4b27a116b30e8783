"""Ratios of times with confidence intervals, and their geometric mean."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Sequence


@dataclass(frozen=True)
class Ratio:
    """baseline / other, with a 95% interval where the repeats allow one."""

    value: float
    low: float | None = None
    high: float | None = None

    @property
    def significant(self) -> bool | None:
        """Whether the interval excludes 1 (no difference); None without an interval."""
        if self.low is None or self.high is None:
            return None
        return not (self.low <= 1.0 <= self.high)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "ci95_low": self.low, "ci95_high": self.high, "significant": self.significant}


def ratio_with_interval(baseline: Sequence[float], other: Sequence[float], confidence: float = 0.95) -> Ratio:
    """Geometric-mean ratio baseline/other and a Welch t-interval on the logs."""
    if not baseline or not other or min(*baseline, *other) <= 0:
        raise ValueError("ratios need positive times on both sides")
    log_a, log_b = [math.log(x) for x in baseline], [math.log(x) for x in other]
    difference = statistics.fmean(log_a) - statistics.fmean(log_b)
    if len(log_a) < 2 or len(log_b) < 2:
        return Ratio(math.exp(difference))
    var_a, var_b = statistics.variance(log_a) / len(log_a), statistics.variance(log_b) / len(log_b)
    standard_error = math.sqrt(var_a + var_b)
    if standard_error == 0:
        return Ratio(math.exp(difference), math.exp(difference), math.exp(difference))
    # Welch-Satterthwaite degrees of freedom.
    dof = (var_a + var_b) ** 2 / (var_a**2 / (len(log_a) - 1) + var_b**2 / (len(log_b) - 1))
    from scipy.stats import t

    half_width = t.ppf(0.5 + confidence / 2, dof) * standard_error
    return Ratio(math.exp(difference), math.exp(difference - half_width), math.exp(difference + half_width))


def geometric_mean(values: Sequence[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None
