"""Adaptive paired acceptance: does a candidate fix more than it breaks, beyond a margin?

Candidate and current program run on the same update-pool examples; per example the paired
difference d = score(candidate) - score(current) is +1 (fix), -1 (break) or 0 (tie) for 0/1 metrics
(graded metrics give values in between; fixes/breaks count d > 0 / d < 0). The sample starts at
`initial` examples and grows only while a one-sided confidence bound at level `alpha` on mean(d)
still straddles `margin`: accept early when the lower bound exceeds the margin, reject early when
the upper bound does not; at `max_size`, at the end of the pool, or when the budget runs out, decide
by the point estimate mean(d) > margin (for 0/1 metrics, (fixes - breaks) / n).

The bound is a normal interval on an Agresti-Caffo-style adjusted sample (one pseudo fix and one
pseudo break added). Why: with 8 paired examples the plain normal bound collapses to zero width when
all d agree (8 ties would "prove" no effect), and exact/Bernstein bounds are too wide to ever stop
early at budgets a small model's user can afford; the adjustment keeps small-n bounds honest and
still lets a clear candidate (e.g. 8 fixes of 8) be decided after the first 8 examples.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from statistics import NormalDist
from typing import Any, Protocol

PairScores = Callable[[list[str]], dict[str, tuple[float, float]]]


@dataclass
class Decision:
    """The record of one acceptance test."""

    candidate_id: str
    fixes: int = 0
    breaks: int = 0
    ties: int = 0
    n: int = 0
    estimate: float = 0.0
    lower: float = -1.0
    upper: float = 1.0
    margin: float = 0.0
    accepted: bool = False
    reason: str = ""
    example_ids: list[str] = field(default_factory=list)
    stages: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_bounds(ds: list[float], alpha: float) -> tuple[float, float]:
    """One-sided (lower, upper) bounds at level `alpha` on the mean paired difference."""
    n = len(ds)
    if n == 0:
        return -1.0, 1.0
    m = n + 2
    mean = sum(ds) / m
    second = (sum(d * d for d in ds) + 2.0) / m
    var = max(second - mean * mean, 0.0)
    half = NormalDist().inv_cdf(1.0 - alpha) * math.sqrt(var / m)
    return max(-1.0, mean - half), min(1.0, mean + half)


class Acceptance(Protocol):
    def decide(self, candidate_id: str, order: list[str], pair_scores: PairScores) -> Decision: ...


class AdaptivePairedAcceptance:
    """See the module docstring. `growth`: "double" or a fixed number of examples added per stage."""

    def __init__(self, margin: float = 0.0, initial: int = 8, max_size: int = 32, growth: str | int = "double",
                 alpha: float = 0.1):
        if initial < 1 or max_size < initial:
            raise ValueError(f"need 1 <= initial <= max_size, got initial={initial}, max_size={max_size}")
        if not 0.0 < alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
        if not -1.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [-1, 1), got {margin}")
        self.margin, self.initial, self.max_size, self.growth, self.alpha = margin, initial, max_size, growth, alpha

    def _next(self, n: int) -> int:
        step = n if self.growth == "double" else int(self.growth)
        return min(self.max_size, n + max(1, step))

    def decide(self, candidate_id: str, order: list[str], pair_scores: PairScores) -> Decision:
        dec = Decision(candidate_id, margin=self.margin)
        ds: list[float] = []
        limit = min(self.max_size, len(order))
        target = min(self.initial, limit)
        while True:
            want = order[len(dec.example_ids) : target]
            got = pair_scores(want) if want else {}
            for ex_id in want:
                if ex_id in got:
                    cur, cand = got[ex_id]
                    d = cand - cur
                    ds.append(d)
                    dec.example_ids.append(ex_id)
                    dec.fixes += d > 0
                    dec.breaks += d < 0
                    dec.ties += d == 0
            dec.n = len(ds)
            dec.stages.append(dec.n)
            dec.estimate = sum(ds) / dec.n if ds else 0.0
            dec.lower, dec.upper = paired_bounds(ds, self.alpha)
            short = len(got) < len(want)
            if not ds:
                dec.accepted, dec.reason = False, "no budget left to evaluate the candidate"
                return dec
            if dec.lower > self.margin:
                dec.accepted, dec.reason = True, f"lower bound {dec.lower:.3f} > margin {self.margin}"
                return dec
            if dec.upper <= self.margin:
                dec.accepted, dec.reason = False, f"upper bound {dec.upper:.3f} <= margin {self.margin}"
                return dec
            if short or dec.n >= limit:
                why = "budget ran out" if short else ("max size reached" if dec.n >= self.max_size else "update pool exhausted")
                dec.accepted = dec.estimate > self.margin
                dec.reason = f"{why}; estimate {dec.estimate:.3f} {'>' if dec.accepted else '<='} margin {self.margin}"
                return dec
            target = self._next(target)
