"""Metric-call accounting that is never exceeded, and the `auto` budget shared with dspy.GEPA.

A metric call is one program rollout plus one metric evaluation on one example (GEPA's unit).
`auto` reuses `dspy.GEPA.auto_budget` itself, with the arguments `dspy.GEPA.compile` passes, so a
HERO-O run and a GEPA run on the same program and data get the same number of calls by construction.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

AUTO_LEVELS = ("light", "medium", "heavy")


def gepa_auto_budget(auto: str, num_predictors: int, trainset_size: int, valset_size: int | None) -> int:
    """Exactly the `max_metric_calls` dspy.GEPA computes for `auto` on this program and data."""
    from dspy.teleprompt.gepa.gepa import AUTO_RUN_SETTINGS, GEPA

    if auto not in AUTO_RUN_SETTINGS:
        raise ValueError(f"auto must be one of {sorted(AUTO_RUN_SETTINGS)}, got {auto!r}")
    # auto_budget uses no instance state; an uninitialised instance avoids GEPA's constructor checks.
    gepa = object.__new__(GEPA)
    return int(
        gepa.auto_budget(
            num_preds=max(num_predictors, 1),
            num_candidates=AUTO_RUN_SETTINGS[auto]["n"],
            valset_size=valset_size if valset_size is not None else trainset_size,
        )
    )


def resolve_budget(
    *,
    auto: str | None,
    max_full_evals: int | None,
    max_metric_calls: int | None,
    num_predictors: int,
    trainset_size: int,
    valset_size: int | None,
) -> int:
    """The total number of metric calls, from at most one of the three budget settings.

    Unlike dspy.GEPA, giving none is allowed and means ``auto="light"`` (so ``compile(program,
    trainset)`` just works); giving more than one is an error, as in GEPA.
    """
    given = sum(x is not None for x in (auto, max_full_evals, max_metric_calls))
    if given > 1:
        raise ValueError(
            "set at most one of auto, max_full_evals, max_metric_calls "
            f"(got auto={auto!r}, max_full_evals={max_full_evals!r}, max_metric_calls={max_metric_calls!r})"
        )
    if max_metric_calls is not None:
        if int(max_metric_calls) < 0:
            raise ValueError(f"max_metric_calls must be >= 0, got {max_metric_calls}")
        return int(max_metric_calls)
    if max_full_evals is not None:
        if int(max_full_evals) < 0:
            raise ValueError(f"max_full_evals must be >= 0, got {max_full_evals}")
        return int(max_full_evals) * (trainset_size + (valset_size or 0))
    return gepa_auto_budget(auto or "light", num_predictors, trainset_size, valset_size)


@dataclass
class Budget:
    """Counts metric calls against a hard total.

    Callers `take(n)` before launching a batch of rollouts and get back how many they may run
    (possibly fewer than asked, possibly 0); granted calls count as spent whether the rollout
    succeeds or fails, so `spent <= total` holds at every instant, not just at the end.
    """

    total: int
    spent: int = 0

    def __post_init__(self) -> None:
        if self.total < 0:
            raise ValueError("budget total must be >= 0")
        self._lock = threading.Lock()

    @property
    def remaining(self) -> int:
        return self.total - self.spent

    def take(self, n: int) -> int:
        with self._lock:
            granted = max(0, min(int(n), self.total - self.spent))
            self.spent += granted
            return granted


def plan_round(remaining: int, rounds_left: int, selection_reserve: int) -> int:
    """The calls one round may use: what is left after the final-selection reserve, split evenly
    over the remaining rounds (unused calls roll over to later rounds)."""
    if rounds_left <= 0:
        return 0
    return max(0, remaining - selection_reserve) // rounds_left


def rounds_for_budget(num_rounds: int, total: int, selection_reserve: int, min_calls_per_round: int) -> int:
    """How many of the ``num_rounds`` rounds the budget can pay for properly.

    A round that cannot afford a diagnosis batch *and* a paired acceptance test decides on a handful
    of examples (a rule adopted at 1 fix : 0 breaks is noise), so at small budgets fewer, better-funded
    rounds beat the paper's T=5. ``min_calls_per_round=0`` keeps T regardless of the budget.
    """
    if min_calls_per_round <= 0 or num_rounds <= 0:
        return max(0, num_rounds)
    affordable = max(0, total - selection_reserve) // min_calls_per_round
    return max(1, min(num_rounds, affordable))
