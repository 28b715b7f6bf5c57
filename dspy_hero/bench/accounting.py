"""Rollout and LM-usage accounting for a comparison run.

Budgets are compared in rollouts (one program run + one metric call), so every method's metric is
wrapped in a counter and the *actual* count is reported, whatever the method promised. LM calls and
tokens are read from each LM's counted history (`dspy_hero.lm.usage`) as deltas around a phase; for a
deterministic local LM, where its time went (prompt, generation, pinned prefixes) is read from its engine.
"""

from __future__ import annotations

import threading
from dataclasses import asdict
from typing import Any

from dspy_hero.lm.local import PinStats, engine_of
from dspy_hero.lm.usage import (
    Usage,
    track_usage,  # noqa: F401  (benchmarks/compare.py and hero_o_replay.py import it here)
    usage_of,
)
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
        self._engine_start: dict[str, PinStats] = {}

    def start(self) -> PhaseUsage:
        self._start = {name: usage_of(lm) for name, lm in self.lms.items() if lm is not None}
        self._engine_start = {name: engine.snapshot() for name, engine in self._engines()}
        return self

    def _engines(self):
        seen: set[int] = set()
        for name, lm in self.lms.items():
            engine = engine_of(lm) if lm is not None else None
            if engine is not None and id(engine) not in seen:
                seen.add(id(engine))
                yield name, engine

    def engine_time(self) -> dict[str, dict[str, float]]:
        """Since `start()`, per deterministic local LM (others have no engine and are left out): requests,
        prompt tokens computed and their seconds, tokens generated and their seconds, and the seconds
        spent putting pinned prefixes in the slot. Why: wall time alone cannot say whether a method is
        slow because it reads long uncached prompts or because it writes long answers."""
        out: dict[str, dict[str, float]] = {}
        for name, engine in self._engines():
            d = engine.snapshot().minus(self._engine_start.get(name, PinStats()))
            out[name] = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in asdict(d).items()}
        return out

    def stop(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        seen: set[int] = set()
        for name, lm in self.lms.items():
            if lm is None or id(lm) in seen:
                continue
            seen.add(id(lm))
            out[name] = (usage_of(lm) - self._start.get(name, Usage())).to_dict()
        return out
