"""Judge executions: DSPy / GEPA metric functions (score in [0, 1] plus feedback), verdicts, VES.

Names load lazily (the metric modules import DSPy and their executors). `ves` is not re-exported here:
it would be shadowed by the submodule `dspy_hero.metrics.ves` once that is imported; use `dspy_hero.ves`
or `dspy_hero.metrics.ves.ves`.
"""

from __future__ import annotations

from dspy_hero.lazy import lazy_exports

_EXPORTS = {
    "Verdict": "dspy_hero.metrics.base",
    "MetricResult": "dspy_hero.metrics.base",
    "ExecutionMetric": "dspy_hero.metrics.base",
    "extract_code": "dspy_hero.metrics.base",
    "score_of": "dspy_hero.metrics.base",
    "feedback_of": "dspy_hero.metrics.base",
    "sql_execution_metric": "dspy_hero.metrics.sql",
    "sql_verdict": "dspy_hero.metrics.sql",
    "SQLJudge": "dspy_hero.metrics.sql",
    "cypher_execution_metric": "dspy_hero.metrics.cypher",
    "cypher_verdict": "dspy_hero.metrics.cypher",
    "CypherJudge": "dspy_hero.metrics.cypher",
    "python_tests_metric": "dspy_hero.metrics.python",
    "ds_outputs_metric": "dspy_hero.metrics.python",
    "r_ves": "dspy_hero.metrics.ves",
    "VESResult": "dspy_hero.metrics.ves",
    "VESDetail": "dspy_hero.metrics.ves",
    "infer_metric": "dspy_hero.metrics.infer",
    "infer_language": "dspy_hero.metrics.infer",
    "result_eq": "dspy_hero.metrics.compare",
    "bird_equal": "dspy_hero.metrics.compare",
}

__getattr__, __dir__, __all__ = lazy_exports(__name__, _EXPORTS)
