"""Name -> task loader registry used by the CLI and the benchmark harness."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from dspy_hero.tasks.base import Task

# name -> "module:function"; loaders are imported lazily so a missing optional dependency of one
# benchmark never breaks the others.
_LOADERS: dict[str, str] = {}


def register_task(name: str, target: str | Callable[..., Task]) -> None:
    _LOADERS[name] = target  # type: ignore[assignment]


def available_tasks() -> list[str]:
    return sorted(_LOADERS)


def load_task(name: str, **kwargs: Any) -> Task:
    if name not in _LOADERS:
        raise KeyError(f"unknown task {name!r}; available: {', '.join(available_tasks())}")
    target = _LOADERS[name]
    if isinstance(target, str):
        module, _, func = target.partition(":")
        target = getattr(importlib.import_module(module), func)
    return target(**kwargs)
