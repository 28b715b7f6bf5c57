"""The round/budget planner: how many rounds, what each may spend, and what the current one has left."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from dspy_hero.optimizer.budget import Budget, plan_round, rounds_for_budget
from dspy_hero.optimizer.strategies.protocols import RoundPlan


class RoundPlanner:
    """Rounds funded well enough to decide, re-planned after every round.

    `reserve()` calls are kept for final selection and the held-out lineage (it grows with the
    archive, up to a fixed fraction of the budget). A round's allowance is what is left (minus the
    reserve) split over the rounds still affordable at `min_calls_per_round`, but at least `need`
    (a diagnosis batch plus every candidate's largest sample: a round that cannot finish its tests
    rejects candidates it could have adopted) when that much is left. Calls a round leaves unused
    fund later rounds; rounds beyond the planned ones run while at least `min_extra` calls are left
    and the previous round still spent something (an unchanged, fully cached round would only repeat
    itself). `left()` is the current round's remaining allowance.
    """

    def __init__(self, budget: Budget, *, reserve: Callable[[], int], num_rounds: int, min_calls_per_round: int,
                 min_extra: int, need: int = 0):
        self.budget, self._reserve, self.need = budget, reserve, need
        self.num_rounds, self.min_calls_per_round, self.min_extra = num_rounds, min_calls_per_round, max(1, min_extra)
        self.planned = rounds_for_budget(num_rounds, budget.remaining, reserve(), min_calls_per_round)
        self._start = budget.spent
        self._allowance = 0

    def rounds(self, predictors: list[str]) -> Iterator[RoundPlan]:
        last_spent = None
        for t in range(1, self.num_rounds + 1):
            reserve = self._reserve()
            if t > self.planned and (self.budget.remaining - reserve < self.min_extra or last_spent == 0):
                return
            rounds_left = rounds_for_budget(self.num_rounds - t + 1, self.budget.remaining, reserve,
                                            self.min_calls_per_round)
            even = plan_round(self.budget.remaining, rounds_left, reserve)
            need = self.need if self.min_calls_per_round > 0 else 0  # 0: the paper's even split over T
            self._allowance = max(even, min(need, self.budget.remaining - reserve))
            self._start = self.budget.spent
            yield RoundPlan(t, predictors[(t - 1) % len(predictors)], self._allowance)
            last_spent = self.budget.spent - self._start

    def left(self) -> int:
        return max(0, min(self._allowance - (self.budget.spent - self._start), self.budget.remaining))

    def spent_this_round(self) -> int:
        return self.budget.spent - self._start
