"""HERO-T: `HeroRefine` (a `dspy.Module`), its demo bank, its programmatic repairs and its refinement trace.

Names load lazily (the module imports DSPy).
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "HeroRefine": "dspy_hero.refine.module",
    "DemoBank": "dspy_hero.refine.demos",
    "verified_demo_bank": "dspy_hero.refine.demos",
    "Demo": "dspy_hero.refine.demos",
    "RefinementTrace": "dspy_hero.refine.trace",
    "Step": "dspy_hero.refine.trace",
    "GateVerdict": "dspy_hero.refine.trace",
    "SqlRepairs": "dspy_hero.refine.repairs",
    "NoRepairs": "dspy_hero.refine.repairs",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
