"""LM calls and tokens: one record (`Usage`) and one meter (`UsageMeter`), however long the run.

Every count of LM usage in dspy-hero goes through these two: the rollout engine and the reflection
step of HERO-O (the meter as a ``dspy.settings.usage_tracker``), the journaled reflection LM, an LM's
whole-life totals (`track_usage`), an evaluation's and a benchmark phase's deltas (`Usage` minus
`Usage`), and the result files (`Usage.to_dict`: ``calls``, ``input_tokens``, ``output_tokens``).

DSPy keeps each LM's calls in `lm.history` but caps that list (10,000 entries by default), so
counting it under-reports long optimizations and evaluations. `track_usage(lm)` swaps in a list whose
meter counts every entry ever appended; `usage_of(lm)` reads it.

DSPy also calls LMs through copies: ``lm.copy(rollout_id=..., temperature=...)`` returns an LM with a
fresh, empty history. MIPROv2 proposes every instruction through such a copy of its prompt model, so
counting only the original's history missed those calls and left their tokens out of the reflection
totals. A tracked LM's copies therefore count into the same meter (`track_usage`).
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CountingHistory", "Usage", "UsageMeter", "token_counts", "track_usage", "usage_of"]


@dataclass(frozen=True)
class Usage:
    """LM calls and tokens: a total, or the difference of two totals."""

    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.calls + other.calls, self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens)

    def __sub__(self, other: Usage) -> Usage:
        return Usage(self.calls - other.calls, self.input_tokens - other.input_tokens,
                     self.output_tokens - other.output_tokens)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Usage:
        data = data or {}
        return cls(int(data.get("calls", 0)), int(data.get("input_tokens", 0)), int(data.get("output_tokens", 0)))


def token_counts(usage: Any) -> tuple[int, int]:
    """(input, output) tokens of one call's usage: LiteLLM's dict (prompt_tokens / completion_tokens),
    a dict or object with input_tokens / output_tokens, or nothing (0, 0)."""
    if usage is None:
        return 0, 0
    if not isinstance(usage, dict):
        if hasattr(usage, "input_tokens"):
            return int(getattr(usage, "input_tokens", 0) or 0), int(getattr(usage, "output_tokens", 0) or 0)
        try:
            usage = dict(usage)
        except (TypeError, ValueError):
            return 0, 0
    inp = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    out = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return int(inp or 0), int(out or 0)


class UsageMeter:
    """Thread-safe running totals of LM calls and tokens; `total` is the `Usage` so far.

    It is a ``dspy.settings.usage_tracker`` (DSPy calls `add_usage` once per LM call made inside
    ``dspy.context(usage_tracker=meter)``), and it sums recorded usage with `add` (a replayed call, a
    cached rollout, the usage of a sub-step).
    """

    def __init__(self, start: Usage | None = None) -> None:
        self._total = start or Usage()
        self._lock = threading.Lock()

    def add_usage(self, model: str | None, usage: Any) -> None:
        """One LM call with its token usage (DSPy's usage-tracker protocol)."""
        inp, out = token_counts(usage)
        self.add(Usage(1, inp, out))

    def add(self, usage: Usage) -> None:
        with self._lock:
            self._total = self._total + usage

    @property
    def total(self) -> Usage:
        with self._lock:
            return self._total


class CountingHistory(list):
    """An LM history list whose meter counts every entry ever appended.

    DSPy caps each LM's history (``max_history_size``, 10,000 by default) by popping old entries, so
    counting the list undercounts long runs; the meter never shrinks.
    """

    def __init__(self, entries: Any = (), meter: UsageMeter | None = None):
        super().__init__(entries)
        self.meter = meter if meter is not None else UsageMeter()
        for entry in self:
            self._count(entry)

    def _count(self, entry: Any) -> None:
        self.meter.add_usage(None, entry.get("usage") if isinstance(entry, dict) else None)

    @property
    def total(self) -> Usage:
        return self.meter.total

    def append(self, entry: Any) -> None:
        self._count(entry)
        super().append(entry)


def track_usage(lm: Any) -> Any:
    """Give `lm` a `CountingHistory` (idempotent), and make its copies count into the same meter, so
    `usage_of(lm)` includes the calls DSPy makes through ``lm.copy(...)``; returns the LM."""
    if lm is not None and not isinstance(getattr(lm, "history", None), CountingHistory):
        lm.history = CountingHistory(getattr(lm, "history", None) or [])
        _count_copies(lm, lm.history.meter)
    return lm


def _count_copies(lm: Any, meter: UsageMeter) -> None:
    """Shadow `lm.copy` so that each copy (and each copy of a copy) gets a history counted by `meter`.

    The shadow is an instance attribute: DSPy's shallow copy carries it over, so every new copy gets
    its own in turn, bound to itself (else a copy's copy would copy the original and lose its kwargs).
    """
    plain_copy = getattr(type(lm), "copy", None)
    if plain_copy is None:  # an LM-like object DSPy cannot copy: nothing to follow
        return

    def copy(**kwargs: Any) -> Any:
        new = plain_copy(lm, **kwargs)
        new.history = CountingHistory(getattr(new, "history", None) or [], meter=meter)
        _count_copies(new, meter)
        return new

    lm.copy = copy


def usage_of(lm: Any) -> Usage:
    """Total calls and tokens the LM recorded (exact with `track_usage`, else what its history still holds)."""
    history = getattr(lm, "history", None)
    if isinstance(history, CountingHistory):  # even when empty: its copies may have counted
        return history.total
    meter = UsageMeter()
    for entry in list(history or []):
        meter.add_usage(None, entry.get("usage") if isinstance(entry, dict) else None)
    return meter.total
