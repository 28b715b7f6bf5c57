"""Rollout and LM-usage accounting for a comparison run.

Budgets are compared in rollouts (one program run + one metric call), so every method's metric is
wrapped in a counter and the *actual* count is reported, whatever the method promised. LM calls and
tokens are read from each LM's history as deltas around a phase.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from typing import Any

from dspy_hero.metrics.base import ExecutionMetric


class CountingMetric:
    """A metric wrapper that counts calls; same 2/3/5-argument signature GEPA inspects."""

    def __init__(self, metric: Any):
        self.metric = metric
        self.calls = 0
        self._lock = threading.Lock()
        self.__name__ = getattr(metric, "__name__", "metric")
        self.prediction_field = getattr(metric, "prediction_field", None)
        self.language = getattr(metric, "language", None)

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        with self._lock:
            self.calls += 1
        return self.metric(gold, pred, trace, pred_name, pred_trace)

    def verdict(self, gold, pred):
        return self.metric.verdict(gold, pred) if isinstance(self.metric, ExecutionMetric) else None


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


class UsageMeter:
    """Usage of several named LMs between `start()` and `stop()`; the same LM object is counted once."""

    def __init__(self, **lms: Any):
        self.lms = lms
        self._start: dict[str, Usage] = {}

    def start(self) -> UsageMeter:
        self._start = {name: usage_of(lm) for name, lm in self.lms.items() if lm is not None}
        return self

    def stop(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        seen: set[int] = set()
        for name, lm in self.lms.items():
            if lm is None or id(lm) in seen:
                continue
            seen.add(id(lm))
            now, then = usage_of(lm), self._start.get(name, Usage())
            out[name] = Usage(now.calls - then.calls, now.input_tokens - then.input_tokens,
                              now.output_tokens - then.output_tokens).to_dict()
        return out
