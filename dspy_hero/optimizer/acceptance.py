"""Paired acceptance as a test: a candidate is adopted only when it is shown better, never on an estimate.

Candidate and current program run on the same update-pool examples; per example the paired
difference d = score(candidate) - score(current) is a fix (d > 0), a break (d < 0) or a tie. The
decision is an exact one-sided sign test (McNemar's exact test for 0/1 metrics) on the discordant
pairs: under "the candidate is no better" (P(fix) <= P(break)) the number of fixes among the m
discordant pairs is at most Binomial(m, 1/2). Its dual is a Clopper-Pearson lower bound theta_L on
P(fix | discordant), which gives the lower bound on the improvement
``L = (m / n) * (2 * theta_L - 1)`` on (fixes - breaks) / n. A candidate is accepted only when
``L > margin`` (so the test rejects "no better" and the improvement exceeds the margin) and the mean
paired difference exceeds the margin too (graded metrics).

Why this test: it is exact at every sample size (no normal approximation, no pseudo-counts), needs no
variance estimate (8 ties prove nothing, and it says so), and ties, which dominate paired prompt
comparisons, cost nothing. Why not a bound on the point estimate: deciding "fixes > breaks" when the
sample runs out adopts a pure-noise rule about 40% of the time (measured in benchmarks/acceptance.py).

The sample grows (``initial``, then doubling up to ``max_size``) only while the decision is open.
The looks share the level by alpha spending (Bonferroni over looks): ``early_share`` of alpha is
split over the early looks, the rest goes to the last one; when the pool or the budget ends early,
that look is the last and spends what is left. Early rejection ("futility": the candidate is
clearly worse, shows no improvement after ``4 * initial`` pairs, or could not pass even if every
remaining pair were a fix) costs no level: stopping to reject can only lower the adoption rate. A test
still open at the end is REJECTED.

Guarantee (false-adoption rate): for a candidate that is not better than the current prompt
(P(fix) <= P(break)), ``P(accepted) <= alpha`` for one decision, whatever the sample sizes, the
looks, or where the budget ran out (given pairs drawn independently of how the candidate was made).
HeroOptimizer gives each of T rounds (at most) ``acceptance_alpha / T`` and splits it over the round's K
candidates by fixed shares (``LevelShares``; default: half to the first, pattern-ranked candidate, the
rest evenly), passed as ``family_size`` = 1 / share, so by the union bound the probability that a run
adopts ANY non-improving candidate is <= ``acceptance_alpha`` (default 0.1). Caveat: after an adoption, later
rounds reuse the same update pool that chose the current prompt, so their level holds only
approximately; before the first adoption (the null world) it is exact. The exact test is discrete,
so measured rates are below the bound: ``python benchmarks/acceptance.py`` gives, per decision at
alpha = 0.1 and up to 32 pairs, 0.030 for a null candidate (0.001 at the loop's alpha / 20) against
0.425 for the old point-estimate rule, and a noise rule in the final program in 1 of 8 seeds
(old rule: 7 of 8) while a +20-point rule is adopted in 8 of 8. Ranked against even shares over 160
seeds (``--seeds 160 --loop-rules sound,sound_even``): noise kept in 6 of 160 with either split, the
+20-point rule in 152 against 146.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

PairScores = Callable[[list[str]], dict[str, tuple[float, float]]]


@dataclass
class Decision:
    """The record of one acceptance test. `lower`/`upper` bound (fixes - breaks) / n (0/1 metrics);
    `p_value` is the exact sign-test p-value at the deciding look, `level` the level it was held to."""

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
    p_value: float = 1.0
    level: float = 0.0
    settled: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def binom_sf(k: int, m: int, p: float = 0.5) -> float:
    """P(X >= k) for X ~ Binomial(m, p)."""
    if k <= 0:
        return 1.0
    if k > m:
        return 0.0
    return min(1.0, sum(math.comb(m, i) * p**i * (1.0 - p) ** (m - i) for i in range(k, m + 1)))


def _solve(f: Callable[[float], float], target: float, increasing: bool) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if (f(mid) < target) == increasing:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def cp_lower(k: int, m: int, level: float) -> float:
    """Clopper-Pearson one-sided lower bound at `level` on a binomial proportion (k of m)."""
    if m <= 0 or k <= 0:
        return 0.0
    return _solve(lambda th: binom_sf(k, m, th), level, increasing=True)


def cp_upper(k: int, m: int, level: float) -> float:
    """Clopper-Pearson one-sided upper bound at `level` on a binomial proportion (k of m)."""
    if m <= 0 or k >= m:
        return 1.0
    return _solve(lambda th: 1.0 - binom_sf(k + 1, m, th), level, increasing=False)


def improvement_bounds(fixes: int, breaks: int, n: int, level: float) -> tuple[float, float]:
    """One-sided (lower, upper) bounds at `level` on (fixes - breaks) / n from the sign test's dual
    (conditional on the m = fixes + breaks discordant pairs)."""
    m = fixes + breaks
    if n <= 0:
        return -1.0, 1.0
    if m == 0:
        return 0.0, 0.0
    share = m / n
    return share * (2 * cp_lower(fixes, m, level) - 1), share * (2 * cp_upper(fixes, m, level) - 1)


def paired_bounds(ds: list[float], alpha: float) -> tuple[float, float]:
    """One-sided (lower, upper) bounds at `alpha` on the mean paired difference of values in [-1, 1]
    (Hoeffding: exact coverage for any distribution, no variance estimate). Used by final selection."""
    n = len(ds)
    if n == 0:
        return -1.0, 1.0
    mean = sum(ds) / n
    half = math.sqrt(2.0 * math.log(1.0 / alpha) / n)  # range 2 -> (b - a)^2 = 4
    return max(-1.0, mean - half), min(1.0, mean + half)


class Acceptance(Protocol):
    def decide(self, candidate_id: str, order: list[str], pair_scores: PairScores, *, family_size: float = 1) -> Decision: ...


class LevelShares(Protocol):
    """How a round splits its level over its K candidates: `shares(K)` gives each candidate's part, in
    the order the candidates were proposed, summing to at most 1 (the union bound then holds whatever
    the weights, as long as they are fixed before any pair is seen)."""

    def shares(self, k: int) -> tuple[float, ...]: ...


@dataclass(frozen=True)
class EvenShares:
    """Plain Bonferroni: 1/K each."""

    def shares(self, k: int) -> tuple[float, ...]:
        return tuple(1.0 / k for _ in range(k))


@dataclass(frozen=True)
class RankedShares:
    """`first` of the level to the first candidate, the rest evenly over the others (a weighted
    Bonferroni split). Why: candidates come in the evidence's pattern order, most frequent failure
    first, and the first one is the one most likely to be real. On the soft-deletion task at 300
    calls the first of four candidates went 10:1 on 30 pairs (p = 0.0059) and an even split refused
    it at 0.0043 (RESULTS.md, session 22); with half the round's level it passes. The order comes from
    the diagnosis pool, never from the update pairs the tests use, so the weights are fixed in advance."""

    first: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 < self.first < 1.0:
            raise ValueError(f"first must be in (0, 1), got {self.first} (EvenShares() is the even split)")

    def shares(self, k: int) -> tuple[float, ...]:
        if k <= 1:
            return (1.0,) * k
        first = max(self.first, 1.0 / k)  # never below the even share
        return (first,) + tuple((1.0 - first) / (k - 1) for _ in range(k - 1))


def family_sizes(level_shares: LevelShares, k: int) -> list[float]:
    """Each of `k` candidates' family size, 1 / its share of the round's level; shares that are not
    `k` positive parts summing to at most 1 are refused, since they would break the run's bound."""
    shares = tuple(level_shares.shares(k))
    if len(shares) != k or any(x <= 0 for x in shares) or sum(shares) > 1.0 + 1e-9:
        raise ValueError(f"{type(level_shares).__name__}.shares({k}) = {shares}: need {k} positive "
                         "shares summing to at most 1, or the run's false-adoption bound does not hold")
    return [1.0 / x for x in shares]


class SignTestAcceptance:
    """The sound paired acceptance of the module docstring.

    `alpha`: the false-adoption level of one decision (divided by `family_size`). `margin`: the
    improvement in (fixes - breaks) / n the lower bound must exceed. `initial`/`max_size`/`growth`:
    the looks. `early_share`: the part of alpha the early looks may spend. `futility_level`: the
    level at which "clearly worse" stops a test early (no level is spent on that).
    """

    def __init__(self, margin: float = 0.0, initial: int = 8, max_size: int = 32, growth: str | int = "double",
                 alpha: float = 0.1, early_share: float = 0.2, futility_level: float = 0.05):
        if initial < 1 or max_size < initial:
            raise ValueError(f"need 1 <= initial <= max_size, got initial={initial}, max_size={max_size}")
        if not 0.0 < alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
        if not 0.0 <= margin < 1.0:
            raise ValueError(f"margin must be in [0, 1), got {margin}: a negative margin would adopt worse prompts")
        if not 0.0 <= early_share < 1.0:
            raise ValueError(f"early_share must be in [0, 1), got {early_share}")
        self.margin, self.initial, self.max_size, self.growth, self.alpha = margin, initial, max_size, growth, alpha
        self.early_share, self.futility_level = early_share, futility_level

    def looks(self, available: int) -> list[int]:
        """The planned sample sizes of the looks for a pool of `available` examples."""
        limit = min(self.max_size, available)
        out = [min(self.initial, limit)]
        while out[-1] < limit:
            step = out[-1] if self.growth == "double" else int(self.growth)
            out.append(min(limit, out[-1] + max(1, step)))
        return out

    def pairs_to_detect(self, fix_share: float, *, family_size: float = 1) -> int | None:
        """The fewest pairs n (<= max_size) at which a candidate that fixes ``fix_share`` of them and
        breaks none is adopted, at the least level the last look can hold (the early looks may have
        spent ``early_share``); None when even max_size pairs cannot show it. A round funds a candidate
        only with that many pairs: a test below it rejects every rule that size of effect can have."""
        level = self.alpha / max(1.0, float(family_size)) * (1.0 - self.early_share)
        for n in range(1, self.max_size + 1):
            fixes = math.floor(fix_share * n)
            lower, _ = improvement_bounds(fixes, 0, n, level)
            if fixes and lower > self.margin and fixes / n > self.margin:
                return n
        return None

    def start(self, candidate_id: str, order: list[str], *, family_size: float = 1) -> AcceptanceTest:
        """An open test that the caller feeds look by look (so a round can interleave its candidates'
        looks and give the budget to the ones still undecided, evenly)."""
        return AcceptanceTest(self, candidate_id, order, self.alpha / max(1.0, float(family_size)))

    def decide(self, candidate_id: str, order: list[str], pair_scores: PairScores, *, family_size: float = 1) -> Decision:
        test = self.start(candidate_id, order, family_size=family_size)
        while not test.done:
            want = test.want()
            test.feed(want, pair_scores(want) if want else {})
        return test.decision

    def _futile(self, dec: Decision, final_n: int) -> str | None:
        """Why the candidate cannot or clearly will not pass (stopping for this costs no level)."""
        m = dec.fixes + dec.breaks
        if m and cp_upper(dec.fixes, m, self.futility_level) < 0.5:
            return f"{dec.fixes} fixes vs {dec.breaks} breaks: clearly worse (level {self.futility_level})"
        if dec.n >= 4 * self.initial and dec.estimate <= self.margin:
            return f"no sign of improvement after {dec.n} pairs ({dec.fixes} fixes vs {dec.breaks} breaks)"
        rest = max(0, final_n - dec.n)
        best_lower, _ = improvement_bounds(dec.fixes + rest, dec.breaks, final_n, self.alpha)
        if best_lower <= self.margin:
            return f"could not pass even if all {rest} remaining pairs were fixes"
        return None


class AcceptanceTest:
    """One open sign test (see SignTestAcceptance): `want()` is the next look's example ids, `feed`
    takes the pairs bought for them (fewer than asked: that look is the last)."""

    def __init__(self, rule: SignTestAcceptance, candidate_id: str, order: list[str], alpha: float):
        self.rule, self.order, self.alpha = rule, list(order), alpha
        self.decision = Decision(candidate_id, margin=rule.margin)
        self.looks = rule.looks(len(self.order))
        self.early = alpha * rule.early_share / (len(self.looks) - 1) if len(self.looks) > 1 else 0.0
        self.spent, self.ds, self.pos, self.j = 0.0, [], 0, 0
        self.done = False

    def want(self) -> list[str]:
        return self.order[self.pos : self.looks[self.j]]

    def feed(self, want: list[str], got: dict[str, tuple[float, float]]) -> None:
        dec, rule = self.decision, self.rule
        self.pos = self.looks[self.j]
        for ex_id in want:
            if ex_id in got:
                cur, cand = got[ex_id]
                d = cand - cur
                self.ds.append(d)
                dec.example_ids.append(ex_id)
                dec.fixes += d > 0
                dec.breaks += d < 0
                dec.ties += d == 0
        dec.n = len(self.ds)
        dec.stages.append(dec.n)
        self.done = True
        if not self.ds:
            dec.reason = "no budget left to evaluate the candidate: rejected (untested)"
            return
        short = len([i for i in want if i in got]) < len(want)
        last = short or self.j == len(self.looks) - 1
        level = (self.alpha - self.spent) if last else self.early
        self.spent += level
        dec.estimate = sum(self.ds) / dec.n
        dec.level = level
        dec.p_value = binom_sf(dec.fixes, dec.fixes + dec.breaks)
        dec.lower, dec.upper = improvement_bounds(dec.fixes, dec.breaks, dec.n, level)
        if dec.lower > rule.margin and dec.estimate > rule.margin:
            dec.accepted, dec.settled = True, True
            dec.reason = (f"accepted: {dec.fixes} fixes vs {dec.breaks} breaks in {dec.n} pairs, sign test "
                          f"p={dec.p_value:.4f} <= level {level:.4f}; lower bound {dec.lower:.3f} > margin {rule.margin}")
            return
        if last:
            why = "budget ran out" if short else ("max size reached" if dec.n >= rule.max_size else "update pool exhausted")
            dec.reason = (f"rejected: {why} at {dec.n} pairs ({dec.fixes} fixes vs {dec.breaks} breaks) without "
                          f"showing improvement > margin {rule.margin} at level {level:.4f} (p={dec.p_value:.4f})")
            return
        if why := rule._futile(dec, self.looks[-1]):
            dec.settled = True
            dec.reason = f"rejected early: {why}"
            return
        self.j += 1
        self.done = False
