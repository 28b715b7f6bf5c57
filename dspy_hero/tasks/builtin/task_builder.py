"""`make_task`: how every built-in task is assembled from its examples and metric.

It lives apart from the package's `__init__` so the task modules can import it while `__init__`
imports them lazily, with no import cycle between the two.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from dspy_hero.tasks.base import Task


def make_task(
    *,
    name: str,
    language: str,
    train: Sequence[dspy.Example],
    test: Sequence[dspy.Example],
    metric: Any,
    inputs: Sequence[str],
    group_key: str | None,
    split_note: str,
    extras: dict[str, Any] | None = None,
    environment_options: dict[str, Any] | None = None,
) -> Task:
    """A Task whose seed program is `GenerateProgram` with the default instructions for `language`
    (assembled like the benchmark tasks, see `dspy_hero.tasks.benchmarks.build_task`)."""
    from dspy_hero.tasks.benchmarks import build_task
    from dspy_hero.tasks.programs import SEED_INSTRUCTIONS

    return build_task(
        name=name, language=language, train=train, test=test, metric_factory=lambda: metric,
        program_inputs=inputs, group_key=group_key, split_note=split_note,
        extras={"builtin": True, **(extras or {})}, environment_options=environment_options,
        instructions=SEED_INSTRUCTIONS[language],
    )
