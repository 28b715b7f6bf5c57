"""HERO-O: `HeroOptimizer` (a `dspy.Teleprompter`) and the `HeroResult` it attaches to the compiled program.

Names load lazily (the optimizer imports DSPy).
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "HeroOptimizer": "dspy_hero.optimizer.hero",
    "HeroResult": "dspy_hero.optimizer.result",
    "RoundRecord": "dspy_hero.optimizer.result",
    "CandidateRecord": "dspy_hero.optimizer.result",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
