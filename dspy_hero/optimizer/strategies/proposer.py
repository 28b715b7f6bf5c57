"""The proposal schedule: the reflection calls of a round, each over another slice of the evidence."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from dspy_hero.optimizer.reflection import ReflectionContext
from dspy_hero.optimizer.strategies.protocols import Evidence


class SlicedProposals:
    """Up to `calls` proposal calls: the full evidence first, then one failure category's slice per
    call (most frequent category first), each at `temperature` with its own sample number. The loop
    stops asking once the round has K distinct new candidates, so a reflector that repeats itself
    costs extra reflection calls, never unused metric calls. Each call is told what the earlier calls
    of the round proposed (read from `base.proposed` when the call is made)."""

    def __init__(self, calls: int, temperature: float):
        self.calls, self.temperature = max(1, calls), temperature

    def contexts(self, base: ReflectionContext, evidence: Evidence) -> Iterator[ReflectionContext]:
        views = [("", evidence.text, evidence.shown)] + list(evidence.slices)
        for k in range(self.calls):
            focus, text, shown = views[k % len(views)]
            yield dataclasses.replace(base, evidence=text, shown_case_ids=list(shown), temperature=self.temperature,
                                      sample=k, focus=focus, proposed=tuple(base.proposed))
