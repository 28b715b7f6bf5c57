"""Benchmark adapters, built-in tasks, seed programs and the task registry.

Names load lazily (loaders import DSPy and, for hub data, `datasets`).
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "Task": "dspy_hero.tasks.base",
    "load_task": "dspy_hero.tasks.registry",
    "register_task": "dspy_hero.tasks.registry",
    "available_tasks": "dspy_hero.tasks.registry",
    "GenerateProgram": "dspy_hero.tasks.programs",
    "DataUnavailable": "dspy_hero.tasks.hub",
    "evaluate_program": "dspy_hero.tasks.evaluate",
    "EvalReport": "dspy_hero.tasks.evaluate",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
