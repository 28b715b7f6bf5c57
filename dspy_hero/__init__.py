"""dspy-hero: HERO (Harnessing Evidence for Test-time Refinement and Prompt Optimization in Program
Generation) for DSPy.

- `HeroOptimizer` (HERO-O): a `dspy.Teleprompter` that learns instructions from execution evidence.
- `HeroRefine` (HERO-T): a `dspy.Module` that refines each generated program at test time.
- Execution metrics for SQL, Cypher and Python usable by `dspy.Evaluate`, `dspy.GEPA`, `dspy.MIPROv2`.

Names are imported lazily so `import dspy_hero` stays cheap and optional engines load only when used.
"""

from __future__ import annotations

import os

from dspy_hero.lazy import lazy_exports

# litellm otherwise fetches its model cost map from the network when first imported; dspy-hero must
# work offline (embedded local model), so default to the copy litellm ships. A user's own value wins.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"

_EXPORTS = {
    "HeroOptimizer": "dspy_hero.optimizer.hero",
    "HeroResult": "dspy_hero.optimizer.result",
    "HeroRefine": "dspy_hero.refine.module",
    "Execution": "dspy_hero.execution.base",
    "SQLiteExecutor": "dspy_hero.execution.sqlite",
    "FalkorDBExecutor": "dspy_hero.execution.cypher",
    "Neo4jExecutor": "dspy_hero.execution.cypher",
    "PythonSandbox": "dspy_hero.execution.python",
    "sql_execution_metric": "dspy_hero.metrics.sql",
    "cypher_execution_metric": "dspy_hero.metrics.cypher",
    "python_tests_metric": "dspy_hero.metrics.python",
    "ds_outputs_metric": "dspy_hero.metrics.python",
    "ves": "dspy_hero.metrics.ves",
    "r_ves": "dspy_hero.metrics.ves",
    "infer_metric": "dspy_hero.metrics.infer",
    "GenerateProgram": "dspy_hero.tasks.programs",
    "load_task": "dspy_hero.tasks.registry",
    "local_lm": "dspy_hero.lm.local",
    "scripted_lm": "dspy_hero.lm.scripted",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
