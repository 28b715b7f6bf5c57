"""SQL execution accuracy as a DSPy metric, with BIRD or Spider semantics.

Examples carry ``db_path`` and ``gold_sql``; the prediction field is ``sql`` (fenced blocks are
unwrapped with `extract_code`). Gold and prediction both run through the read-only `SQLiteExecutor`.

Feedback choice. A failing prediction's feedback names the error type and message. A prediction that
runs but answers wrongly gets its *own* result described (row and column counts, column names, first
rows) plus *which* property differs from the expected result — the number of rows, the number of
columns, the row order, or the values — never the expected rows, their counts or the gold SQL. The
property tells a reflection LM where to look (a missing GROUP BY vs a wrong filter) without handing
it the answer. ``reveal_expected=True`` adds the gold SQL and the expected rows, for debugging only.

A gold query that fails to execute (or overflows the row cap) makes the example unscorable: the
metric logs a warning and scores 0 with feedback saying so, rather than raising, so one broken label
cannot abort an optimization run. A missing database file, by contrast, is a configuration error and
raises FileNotFoundError at once.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any

from dspy_hero.execution.base import EMPTY_PROGRAM, Execution
from dspy_hero.execution.sqlite import SQLiteExecutor, Watchdog
from dspy_hero.fields import get_field
from dspy_hero.metrics.base import (
    ExecutionMetric,
    LRUCache,
    Verdict,
    extract_code,
    prediction_text,
    require_fields,
)
from dspy_hero.metrics.compare import bird_equal, describe_difference, has_order_by, result_eq

__all__ = ["SQLJudge", "sql_execution_metric", "sql_verdict"]

logger = logging.getLogger(__name__)

SEMANTICS = ("bird", "spider")


@dataclass(frozen=True)
class _Gold:
    execution: Execution
    order_matters: bool


class SQLJudge:
    """Judges one SQL prediction against its example's gold query; caches gold executions.

    The cache is an LRU keyed by (database path, gold SQL) and guarded by a lock, so a metric shared
    by DSPy's evaluation threads runs each gold query once.
    """

    def __init__(
        self,
        semantics: str = "bird",
        timeout_s: float = 30.0,
        max_rows: int = 100_000,
        reveal_expected: bool = False,
        cache_size: int = 4096,
    ):
        if semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}, got {semantics!r}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.semantics = semantics
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.reveal_expected = bool(reveal_expected)
        self._cache = LRUCache(cache_size)
        self._watchdog = Watchdog()  # one backstop thread for the executors this judge makes per query

    def clear(self) -> None:
        self._cache.clear()

    def gold(self, db_path: str, gold_sql: str) -> _Gold:
        key = (os.path.abspath(db_path), gold_sql)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        execution = self._executor(db_path).run(gold_sql)
        entry = _Gold(execution, self.semantics == "spider" and has_order_by(gold_sql))
        self._cache.put(key, entry)
        return entry

    def __call__(self, example: Any, pred: Any) -> Verdict:
        require_fields(example, ("gold_sql", "db_path"), "sql_execution_metric")
        db_path = str(get_field(example, "db_path"))
        gold_sql = str(get_field(example, "gold_sql"))
        if not os.path.isfile(db_path):
            raise FileNotFoundError(f"sql_execution_metric: database file not found: {db_path}")
        gold = self.gold(db_path, gold_sql)
        if not gold.execution.ok or gold.execution.truncated:
            if gold.execution.ok:
                why = "overflows the row cap"
            else:  # the error type only: its message could quote the label
                why = f"fails with {gold.execution.error_type}"
            logger.warning("gold query %s on %s (%s): %s", why, db_path, gold.execution.describe(), gold_sql)
            note = f" {gold.execution.describe()}. Gold SQL: {gold_sql}" if self.reveal_expected else ""
            return Verdict(
                0.0, f"gold query failed: the reference query {why}; this example cannot be scored.{note}"
            )
        try:
            pred_sql = extract_code(prediction_text(pred, "sql"), "sql")
            executed = self._executor(db_path).run(pred_sql)
            return sql_verdict(
                executed, gold.execution, self.semantics, gold.order_matters, self.reveal_expected, gold_sql
            )
        except Exception as exc:  # noqa: BLE001 - a prediction must get a score, whatever its text
            logger.warning("judging an SQL prediction failed unexpectedly", exc_info=True)
            return Verdict(0.0, f"The prediction could not be judged: {type(exc).__name__}: {exc}"[:500])

    def _executor(self, db_path: str) -> SQLiteExecutor:
        return SQLiteExecutor(db_path, self.timeout_s, self.max_rows, watchdog=self._watchdog)


def sql_verdict(
    pred: Execution,
    gold: Execution,
    semantics: str,
    order_matters: bool = False,
    reveal_expected: bool = False,
    gold_sql: str = "",
) -> Verdict:
    """Score a prediction's execution against the gold execution and explain the outcome."""
    if not pred.ok:
        if pred.error_type == EMPTY_PROGRAM:
            return Verdict(0.0, "EmptyProgram: the answer contained no SQL query.")
        return Verdict(0.0, f"The query failed with {pred.error_type}: {pred.error_message}")
    if pred.truncated:
        return Verdict(
            0.0, f"The query {pred.describe(max_rows=0)}; the result is too large to be the expected one."
        )
    if semantics == "bird":
        correct = bird_equal(pred.rows, gold.rows)
    else:
        correct = result_eq(pred.rows, gold.rows, order_matters)
    if correct:
        return Verdict(1.0, f"Correct: the query {pred.describe(max_rows=0)}, matching the expected result.")
    differs = describe_difference(pred.rows, gold.rows, pred.column_count, gold.column_count,
                                  order_matters=order_matters, set_semantics=semantics == "bird")
    feedback = f"The query ran but its result differs from the expected one ({differs}). It {pred.describe(max_rows=3)}."
    if reveal_expected:
        feedback += f" Expected: {gold.describe(max_rows=5)}. Gold SQL: {gold_sql}"
    return Verdict(0.0, feedback)


def sql_execution_metric(
    semantics: str = "bird",
    timeout_s: float = 30.0,
    max_rows: int = 100_000,
    reveal_expected: bool = False,
    prediction_field: str | None = None,
) -> ExecutionMetric:
    """A DSPy metric scoring SQL by execution: 1.0 when the prediction's result matches the gold's.

    ``semantics="bird"`` compares row sets (BIRD EX); ``"spider"`` uses Spider's result_eq (column
    permutation, multiset, row order only when the gold query's outermost SELECT has ORDER BY).
    """
    judge = SQLJudge(semantics, timeout_s, max_rows, reveal_expected)
    metric = ExecutionMetric(judge, name=f"sql_execution_{semantics}", language="sql", close=judge.clear,
                             prediction_field=prediction_field)
    metric.semantics = semantics
    return metric
