"""Bootstrap confidence intervals over per-example outcomes.

Methods are evaluated on the same examples, so differences are paired: resampling examples (not
methods independently) keeps the correlation between two methods' outcomes and gives much tighter,
correct intervals for "HERO-O minus GEPA" than two separate intervals would.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float
    n: int
    level: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return f"{self.estimate * 100:+.1f} [{self.low * 100:+.1f}, {self.high * 100:+.1f}]"


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    pos = q * (len(sorted_values) - 1)
    lo, hi = int(pos), min(int(pos) + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_mean(values: Sequence[float], n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> Interval:
    """Percentile bootstrap interval of a mean (e.g. pass@1 from 0/1 outcomes)."""
    return paired_bootstrap(values, [0.0] * len(values), n_boot=n_boot, seed=seed, level=level)


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> Interval:
    """Percentile bootstrap interval of mean(a - b) over paired examples (same order in both)."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must have the same length ({len(a)} vs {len(b)})")
    n = len(a)
    diffs = [float(x) - float(y) for x, y in zip(a, b)]
    if n == 0:
        return Interval(0.0, 0.0, 0.0, 0, level)
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    tail = (1.0 - level) / 2.0
    return Interval(sum(diffs) / n, _quantile(means, tail), _quantile(means, 1.0 - tail), n, level)


def fixes_and_breaks(before: Sequence[float], after: Sequence[float]) -> tuple[int, int]:
    """(wrong -> right, right -> wrong) counts between two paired outcome lists."""
    fixes = sum(1 for x, y in zip(before, after) if x < 1.0 <= y)
    breaks = sum(1 for x, y in zip(before, after) if y < 1.0 <= x)
    return fixes, breaks
