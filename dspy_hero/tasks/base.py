"""The Task record: everything the CLI, notebooks and benchmark harness need about one benchmark."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import dspy

from dspy_hero.metrics.base import ExecutionMetric


@dataclass
class Task:
    """One program-generation task with fixed splits.

    `train` is the optimization pool (HERO-O splits it further into diagnosis/update/selection),
    `test` is reserved for final evaluation. `split_note` states where the split came from, so every
    result can say which subset it was measured on.
    """

    name: str
    language: str  # "sql" | "cypher" | "python"
    train: list[dspy.Example]
    test: list[dspy.Example]
    metric: ExecutionMetric
    make_program: Callable[[], dspy.Module]
    group_key: str | None = None
    environment_for: Callable[[dspy.Example], Any] | None = None
    split_note: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    def close(self) -> None:
        """Release the metric's engines and the HERO-T environments built for this task."""
        self.metric.close()
        clear = getattr(self.environment_for, "clear", None)
        if callable(clear):
            clear()
