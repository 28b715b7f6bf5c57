"""Rollout and LM-usage accounting for a comparison run.

Budgets are compared in rollouts (one program run + one metric call), so every method's metric is
wrapped in a counter and the *actual* count is reported, whatever the method promised. LM calls and
tokens are read from each LM's counted history (`dspy_hero.lm.usage`) as deltas around a phase.
"""

from __future__ import annotations

import threading
from typing import Any

from dspy_hero.lm.usage import Usage, usage_of
from dspy_hero.lm.usage import track_usage  # noqa: F401  (benchmarks/compare.py and hero_o_replay.py import it here)
from dspy_hero.metrics.base import ExecutionMetric

__all__ = ["CountingMetric", "PhaseUsage"]


class CountingMetric:
    """A metric wrapper that counts calls; same 2/3/5-argument signature GEPA inspects."""

    def __init__(self, metric: Any):
        self.metric = metric
        self.calls = 0
        self._lock = threading.Lock()
        self.__name__ = getattr(metric, "__name__", "metric")
        # a journal names its run's metric by module and qualname: the wrapped metric's, so resuming a
        # log with a different metric is refused even through this wrapper
        self.__qualname__ = getattr(metric, "__qualname__", type(metric).__qualname__)
        self.__module__ = getattr(metric, "__module__", None) or type(metric).__module__
        self.prediction_field = getattr(metric, "prediction_field", None)
        self.language = getattr(metric, "language", None)

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None):
        with self._lock:
            self.calls += 1
        return self.metric(gold, pred, trace, pred_name, pred_trace)

    def verdict(self, gold, pred):
        return self.metric.verdict(gold, pred) if isinstance(self.metric, ExecutionMetric) else None


class PhaseUsage:
    """Usage of several named LMs between `start()` and `stop()`, as differences of their meters'
    totals (`dspy_hero.lm.usage`); the same LM object is counted once. It counts nothing itself."""

    def __init__(self, **lms: Any):
        self.lms = lms
        self._start: dict[str, Usage] = {}

    def start(self) -> PhaseUsage:
        self._start = {name: usage_of(lm) for name, lm in self.lms.items() if lm is not None}
        return self

    def stop(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        seen: set[int] = set()
        for name, lm in self.lms.items():
            if lm is None or id(lm) in seen:
                continue
            seen.add(id(lm))
            out[name] = (usage_of(lm) - self._start.get(name, Usage())).to_dict()
        return out
