"""The diagnosis sampler: which diagnosis-pool examples the current prompt is run on each round."""

from __future__ import annotations

import random

from dspy_hero.optimizer.strategies.protocols import RoundPlan


def diagnosis_limit(allowance: int, acceptance_initial: int) -> int:
    """Paid diagnosis rollouts in a round: half the round, but when the round is tight, no more than
    what leaves one acceptance test's initial sample (both prompts) -- though never under a third.
    A candidate decided on 6 ties teaches nothing; 7 diagnosis cases still show a few failures."""
    half, third = allowance // 2, allowance // 3
    return max(0, min(half, max(third, allowance - 2 * acceptance_initial)))


class RotatingSampler:
    """A seeded shuffle of the diagnosis pool, read from where the last round stopped, with examples
    never shown to the reflector first. Why: an unchanged prompt would otherwise re-render the same
    few cases under the token budget and a deterministic reflector would repeat itself."""

    def __init__(self, diagnosis: list[str], seed: int, batch_size: int, acceptance_initial: int):
        self.order = list(diagnosis)
        random.Random(seed).shuffle(self.order)
        self.batch_size = min(len(self.order), batch_size)
        self.acceptance_initial = acceptance_initial
        self.cursor = 0
        self.shown: set[str] = set()

    def next(self, plan: RoundPlan) -> tuple[list[str], int]:
        start = self.cursor
        batch = (self.order[start:] + self.order[:start])[: self.batch_size]
        return batch, diagnosis_limit(plan.allowance, self.acceptance_initial)

    def seen(self, diagnosed: list[str], shown: list[str]) -> None:
        self.cursor = (self.cursor + len(diagnosed)) % max(1, len(self.order))
        self.shown.update(shown)

    def unseen_first(self, ids: list[str]) -> list[str]:
        return sorted(ids, key=lambda i: i in self.shown)
