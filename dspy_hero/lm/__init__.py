"""Language models: the embedded local model (`local_lm`, model packs), `ProgramAdapter`, exact usage
totals, and deterministic scripted LMs for tests (`scripted_lm`).

Names load lazily: `local_lm` needs the `local` extra (xllamacpp) only when called.
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "local_lm": "dspy_hero.lm.local",
    "close_local_servers": "dspy_hero.lm.local",
    "ProgramAdapter": "dspy_hero.lm.adapter",
    "program_adapter": "dspy_hero.lm.adapter",
    "Usage": "dspy_hero.lm.usage",
    "UsageMeter": "dspy_hero.lm.usage",
    "track_usage": "dspy_hero.lm.usage",
    "usage_of": "dspy_hero.lm.usage",
    "install_model_pack": "dspy_hero.lm.model_pack",
    "resolve_model": "dspy_hero.lm.model_pack",
    "ModelNotFoundError": "dspy_hero.lm.model_pack",
    "ModelIntegrityError": "dspy_hero.lm.model_pack",
    "scripted_lm": "dspy_hero.lm.scripted",
    "ScriptedRequest": "dspy_hero.lm.scripted",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
