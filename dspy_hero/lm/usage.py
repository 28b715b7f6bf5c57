"""Exact LM call and token totals, however long the run.

DSPy keeps each LM's calls in `lm.history` but caps that list (10,000 entries by default), so
counting it under-reports long optimizations and evaluations. `track_usage(lm)` swaps in a list that
keeps running totals of every entry ever appended; `usage_of(lm)` reads them.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Usage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.calls + other.calls, self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens)

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def _entry_usage(entry: Any) -> tuple[int, int]:
    usage = (entry.get("usage") if isinstance(entry, dict) else None) or {}
    return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)


class CountingHistory(list):
    """An LM history list that keeps running totals of every entry ever appended.

    DSPy caps each LM's history (``max_history_size``, 10,000 by default) by popping old entries, so
    counting the list undercounts long runs; these totals never shrink.
    """

    def __init__(self, entries: Any = ()):
        super().__init__(entries)
        self._lock = threading.Lock()
        self.total = Usage()
        for entry in self:
            self._count(entry)

    def _count(self, entry: Any) -> None:
        tin, tout = _entry_usage(entry)
        with self._lock:
            self.total = Usage(self.total.calls + 1, self.total.input_tokens + tin, self.total.output_tokens + tout)

    def append(self, entry: Any) -> None:
        self._count(entry)
        super().append(entry)


def track_usage(lm: Any) -> Any:
    """Give `lm` a `CountingHistory` (idempotent); returns the LM."""
    if lm is not None and not isinstance(getattr(lm, "history", None), CountingHistory):
        lm.history = CountingHistory(getattr(lm, "history", None) or [])
    return lm


def usage_of(lm: Any) -> Usage:
    """Total calls and tokens the LM recorded (exact with `track_usage`, else what its history still holds)."""
    history = getattr(lm, "history", None) or []
    if isinstance(history, CountingHistory):
        return history.total
    total = Usage(calls=len(history))
    for entry in list(history):
        tin, tout = _entry_usage(entry)
        total.input_tokens += tin
        total.output_tokens += tout
    return total
