"""Small statistics for benchmark tables: percentiles, medians that tolerate missing values, ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values (fraction 0.99 = p99); NaN when empty."""
    if not sorted_values:
        return float("nan")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction must be within [0, 1], got {fraction}")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def median(values: Iterable[float]) -> float:
    """Median of the values that are numbers (NaN marks 'not measured'); NaN when none are."""
    present = [value for value in values if not math.isnan(value)]
    return statistics.median(present) if present else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when either is missing or the denominator is zero."""
    if math.isnan(numerator) or math.isnan(denominator) or denominator == 0:
        return float("nan")
    return numerator / denominator
