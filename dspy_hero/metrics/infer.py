"""Infer the execution metric from the examples' fields, so `HeroOptimizer().compile(program, trainset)`
works with no metric given. The conventions are listed in `dspy_hero.metrics.base`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dspy_hero.fields import get_field
from dspy_hero.metrics.base import ExecutionMetric


def infer_language(examples: Sequence[Any]) -> str:
    """'sql', 'cypher', 'python-tests' or 'python-outputs', from the examples' label fields.

    Every example is inspected and all must agree: a mixed trainset has no single execution metric.
    """
    if not examples:
        raise ValueError("cannot infer a metric from an empty trainset")
    kinds = {_kind(ex) for ex in examples}
    if None in kinds:
        bad = next(ex for ex in examples if _kind(ex) is None)
        keys = sorted(bad.keys()) if hasattr(bad, "keys") else type(bad).__name__
        raise ValueError(
            "cannot infer an execution metric: an example has none of the label fields "
            "(gold_sql + db_path, gold_cypher + graph, test_code, ground_truth_code + test_script); "
            f"its fields are {keys}. Pass metric=... explicitly."
        )
    if len(kinds) > 1:
        raise ValueError(f"examples mix task kinds {sorted(kinds)}; pass metric=... explicitly")
    return kinds.pop()


def _kind(example: Any) -> str | None:
    if get_field(example, "gold_sql") is not None and get_field(example, "db_path") is not None:
        return "sql"
    if get_field(example, "gold_cypher") is not None and get_field(example, "graph") is not None:
        return "cypher"
    if get_field(example, "test_code") is not None:
        return "python-tests"
    if get_field(example, "ground_truth_code") is not None and get_field(example, "test_script") is not None:
        return "python-outputs"
    return None


def infer_metric(examples: Sequence[Any], prediction_field: str | None = None) -> ExecutionMetric:
    """The default execution metric for these examples (BIRD semantics for SQL), reading the
    program from `prediction_field` (None: the language's default, sql / cypher / code)."""
    kind = infer_language(examples)
    if kind == "sql":
        from dspy_hero.metrics.sql import sql_execution_metric

        return sql_execution_metric(prediction_field=prediction_field)
    if kind == "cypher":
        from dspy_hero.metrics.cypher import cypher_execution_metric

        return cypher_execution_metric(prediction_field=prediction_field)
    if kind == "python-tests":
        from dspy_hero.metrics.python import python_tests_metric

        return python_tests_metric(prediction_field=prediction_field)
    from dspy_hero.metrics.python import ds_outputs_metric

    return ds_outputs_metric(prediction_field=prediction_field)
