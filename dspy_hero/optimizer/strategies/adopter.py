"""The adopter: which of a round's accepted candidates becomes the current prompt."""

from __future__ import annotations

from collections.abc import Callable

from dspy_hero.optimizer.strategies.protocols import Candidate


class LowerBoundAdopter:
    """The accepted candidate with the highest lower bound on its improvement; then the higher point
    estimate; then the shorter prompt. Why the bound: candidates of a round are decided on different
    sample sizes, and the point estimate of a small sample (1 fix : 0 breaks) is the noisiest number
    of all; the lower bound is what the test actually established."""

    def __init__(self, tokens: Callable[[str], int]):
        self.tokens = tokens

    def adopt(self, tested: list[Candidate]) -> Candidate | None:
        accepted = [c for c in tested if c.record.decision is not None and c.record.decision.accepted]
        if not accepted:
            return None
        return max(accepted, key=lambda c: (c.record.decision.lower, c.record.decision.estimate,
                                            -self.tokens(c.state.render())))
