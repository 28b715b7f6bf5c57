"""The archive of adopted prompts and the final choice among them on the selection pool.

Selection is adaptive: every live entry is scored on a chunk of the selection pool, entries that
are clearly worse than the current leader (a paired bound on their score gap is above zero) are
dropped, and the next chunk is only bought for the survivors. Ties on the selection pool go to the
later adopted entry, then to the shorter prompt: each adoption already won a paired comparison
against its predecessor on the update pool, so when the (often small) selection pool cannot tell
entries apart, that accumulated evidence decides rather than prompt length.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from dspy_hero.optimizer.acceptance import paired_bounds

EntryScores = Callable[[int, list[str]], dict[str, float]]


@dataclass
class ArchiveEntry:
    entry_id: str
    round: int
    instructions: dict[str, str]
    prompt_tokens: int
    acceptance_estimate: float | None = None
    selection_mean: float | None = None
    selection_n: int = 0
    selected: bool = False
    dropped_after: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SelectionOutcome:
    winner: int
    compared_on: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Selector(Protocol):
    def select(self, entries: list[ArchiveEntry], order: list[str], scores: EntryScores) -> SelectionOutcome: ...


class AdaptiveSelector:
    """Chunked racing on the selection pool (see module docstring)."""

    def __init__(self, chunk: int = 8, alpha: float = 0.1):
        self.chunk = max(1, int(chunk))
        self.alpha = alpha

    def select(self, entries: list[ArchiveEntry], order: list[str], scores: EntryScores) -> SelectionOutcome:
        if len(entries) == 1:
            return SelectionOutcome(0, notes=["only the seed in the archive: nothing to select"])
        alive = list(range(len(entries)))
        got: dict[int, dict[str, float]] = {i: {} for i in alive}
        notes: list[str] = []
        for start in range(0, len(order), self.chunk):
            chunk = order[start : start + self.chunk]
            short = False
            for i in alive:
                res = scores(i, chunk)
                got[i].update(res)
                short |= len(res) < len(chunk)
            common = _common(got, alive)
            leader = self._leader(entries, got, alive, common)
            for i in list(alive):
                if i == leader or not common:
                    continue
                _, upper = paired_bounds([got[i][e] - got[leader][e] for e in common], self.alpha)
                if upper < 0:
                    alive.remove(i)
                    entries[i].dropped_after = len(common)
            if short:
                notes.append("selection stopped early: budget ran out")
                break
            if len(alive) == 1:
                break
        common = _common(got, alive)
        for i, e in enumerate(entries):
            ids = [x for x in got[i]]
            e.selection_n = len(ids)
            e.selection_mean = sum(got[i][x] for x in ids) / len(ids) if ids else None
        if not common:
            winner = max(alive, key=lambda i: entries[i].round)
            notes.append("no selection examples could be scored: the most recently adopted prompt wins")
        else:
            winner = self._leader(entries, got, alive, common)
        entries[winner].selected = True
        return SelectionOutcome(winner, common, notes)

    @staticmethod
    def _leader(entries, got, alive, common) -> int:
        def key(i: int):
            mean = sum(got[i][e] for e in common) / len(common) if common else 0.0
            return (-mean, -entries[i].round, entries[i].prompt_tokens, i)

        return min(alive, key=key)


def _common(got: dict[int, dict[str, float]], alive: list[int]) -> list[str]:
    if not alive:
        return []
    first = got[alive[0]]
    return [e for e in first if all(e in got[i] for i in alive)]
