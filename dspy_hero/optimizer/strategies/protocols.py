"""One protocol per HERO-O decision, and the small records passed between them.

The round loop (optimizer/run.py) only calls these; each default lives in its own module of this
package and can be replaced through HeroOptimizer's constructor. A strategy gets its settings when
it is built and never reads another strategy's settings or the optimizer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from dspy_hero.optimizer.acceptance import Acceptance, Decision, PairScores
from dspy_hero.optimizer.archive import ArchiveEntry, EntryScores, SelectionOutcome, Selector
from dspy_hero.optimizer.instructions import PromptState
from dspy_hero.optimizer.pools import Pools, PoolSplitter
from dspy_hero.optimizer.reflection import Proposal, ReflectionContext
from dspy_hero.optimizer.result import CandidateRecord

__all__ = [
    "Acceptance", "Adopter", "ArchiveEntry", "Candidate", "CandidateBuilder", "Decision", "DiagnosisSampler",
    "EntryScores", "Evidence", "EvidenceBuilder", "PairScores", "Planner", "PoolSplitter", "Pools", "Proposer",
    "ReflectFn", "RoundPlan", "SelectionOutcome", "Selector",
]


@dataclass(frozen=True)
class RoundPlan:
    """One round: its number, the predictor it revises, and the metric calls it may spend."""

    round: int
    predictor: str
    allowance: int


@dataclass
class Evidence:
    """The diagnosed cases of a round and what the reflector is shown of them. `slices` are further
    renderings over subsets (one failure category each) that later proposal calls use for diversity."""

    cases: list[Any]
    text: str
    shown: list[str]
    slices: list[tuple[str, str, list[str]]] = field(default_factory=list)  # (category, text, shown ids)

    @property
    def has_failures(self) -> bool:
        return any(not c.passed for c in self.cases)

    def shown_cases(self, ids: list[str] | None = None) -> list[Any]:
        keep = set(self.shown if ids is None else ids)
        return [c for c in self.cases if c.case_id in keep]


@dataclass
class Candidate:
    """A queued candidate: its record (status, decision) and the prompt state it would make current."""

    record: CandidateRecord
    state: PromptState


class Planner(Protocol):
    """Owns the budget: yields rounds, says what the current round has left, never exceeds the total."""

    def rounds(self, predictors: list[str]) -> Iterator[RoundPlan]: ...

    def left(self) -> int: ...


class DiagnosisSampler(Protocol):
    def next(self, plan: RoundPlan) -> tuple[list[str], int]:
        """(example ids to diagnose, in order; the most of them that may be paid for)."""
        ...

    def seen(self, diagnosed: list[str], shown: list[str]) -> None: ...

    def unseen_first(self, ids: list[str]) -> list[str]:
        """`ids` reordered so examples never shown to the reflector come first."""
        ...


class EvidenceBuilder(Protocol):
    def render(self, results: list[Any], predictor: str) -> Evidence: ...


ReflectFn = Callable[[ReflectionContext], Proposal]


class Proposer(Protocol):
    def contexts(self, base: ReflectionContext, evidence: Evidence) -> Iterator[ReflectionContext]:
        """The proposal calls of a round, each over another evidence slice / sample."""
        ...


class CandidateBuilder(Protocol):
    def build(self, round_no: int, state: PromptState, proposal: Proposal, cases: list[Any],
              rejected: dict[str, str | None], taken: set[str]) -> tuple[list[CandidateRecord], list[Candidate]]: ...


class Adopter(Protocol):
    def adopt(self, tested: list[Candidate]) -> Candidate | None: ...
