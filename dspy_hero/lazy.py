"""Lazy package exports: a package names its public objects and the module each lives in, and a name's
module is imported on first access, so `import dspy_hero.metrics` does not load DSPy, FalkorDB or the
sandbox until something from them is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class LazyExports:
    """A package's name -> module map; `attribute` is the package's module-level `__getattr__`."""

    package: str
    exports: Mapping[str, str]

    def attribute(self, name: str) -> Any:
        module = self.exports.get(name)
        if module is None:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module), name)

    def names(self) -> list[str]:
        return sorted(self.exports)


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """`__getattr__`, `__dir__` and `__all__` for `package`, from a map of public name -> defining module."""
    lazy = LazyExports(package, dict(exports))

    def __dir__() -> list[str]:
        return sorted(set(lazy.names()) | set(importlib.import_module(package).__dict__))

    return lazy.attribute, __dir__, lazy.names()
