"""Cypher execution accuracy (CypherBench EX) as a DSPy metric.

Examples carry ``graph`` (a graph name, or a file path) and ``gold_cypher``, plus an optional
``graph_source`` (a Cypher script or JSON nodes/edges file) that the embedded engine loads on first
use; the prediction field is ``cypher`` (fenced blocks unwrapped with `extract_code`).

Semantics, as CypherBench's harness: a prediction identical to the gold text scores 1 without
running (here once the gold has run: a gold that fails makes the example unscorable, where the
official script would still give the identical text 1); otherwise both queries run (the prediction with a 120 s timeout by default), cells are normalized (nodes to property
maps, lists sorted inside cells, dates to ISO strings) and compared with `result_eq` — both empty is
equal, row and column counts must match, columns may be permuted, rows form a multiset, and row order
counts only when the gold query says ORDER BY (anywhere, as the official substring test; see
`order_matters`). Any error in the prediction scores 0.

Engine: `engine` is any executor with ``run(cypher, graph)`` (`FalkorDBExecutor`, `Neo4jExecutor`),
or a mapping ``{graph name: executor}`` (CypherBench serves each graph from its own Neo4j server).
With ``engine=None``: Neo4j when HERO_NEO4J_URI is set (connected at construction, so a wrong URI
fails before any budget is spent), else one embedded FalkorDB server started on first use and owned
by the metric (stopped by ``metric.close()`` or when the metric is collected).

Feedback follows the SQL metric: error type and message for a failing prediction; for a wrong result,
the prediction's own result and which property differs (row count, column count, order, values),
never the expected rows or the gold query unless ``reveal_expected=True``.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dspy_hero.execution.base import EMPTY_PROGRAM, ENVIRONMENT, Execution
from dspy_hero.execution.cypher_graphs import code_skeleton
from dspy_hero.execution.cypher_environment import default_engine, ensure_loaded, neo4j_configured, resolve_graph
from dspy_hero.fields import get_field
from dspy_hero.metrics.base import (
    ExecutionMetric,
    LRUCache,
    Verdict,
    extract_code,
    prediction_text,
    require_fields,
)
from dspy_hero.metrics.compare import describe_difference, result_eq

__all__ = ["CypherJudge", "cypher_execution_metric", "cypher_verdict", "order_matters"]

logger = logging.getLogger(__name__)

_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def order_matters(gold_cypher: str) -> bool:
    """CypherBench's rule: row order counts when the gold query says ORDER BY anywhere (subqueries
    included), ignoring only string literals and comments, where the official substring test would
    also fire. Unlike `has_order_by` (SQL, outermost query only), a ``CALL { ... ORDER BY ... }`` counts."""
    return bool(_ORDER_BY.search(code_skeleton(gold_cypher)))


@dataclass(frozen=True)
class _Gold:
    execution: Execution
    order_matters: bool


class CypherJudge:
    """Judges one Cypher prediction against its example's gold query; caches gold executions per
    (engine, graph, gold query) in a locked LRU, so a metric shared by evaluation threads runs each
    gold query once."""

    def __init__(
        self,
        engine: Any = None,
        timeout_s: float = 120.0,
        max_rows: int = 100_000,
        reveal_expected: bool = False,
        cache_size: int = 4096,
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.reveal_expected = bool(reveal_expected)
        self._lock = threading.Lock()
        self._cache = LRUCache(cache_size)
        self._owned_close: weakref.finalize | None = None
        if engine is None and neo4j_configured():
            engine = default_engine(self.timeout_s, self.max_rows)  # connects now: a bad URI fails here
            self._owned_close = weakref.finalize(self, engine.close)
        self._engine = engine

    def engine(self, graph: str) -> Any:
        """The executor serving `graph` (starting the embedded engine on first use)."""
        if isinstance(self._engine, Mapping):
            if graph not in self._engine:
                raise LookupError(f"no engine for graph {graph!r}; engines are configured for {sorted(self._engine)}")
            return self._engine[graph]
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = default_engine(self.timeout_s, self.max_rows)
                    self._owned_close = weakref.finalize(self, engine.close)
                    self._engine = engine
        return self._engine

    def close(self) -> None:
        """Stop the engine the metric started (if any) and forget cached gold results."""
        with self._lock:
            self._cache.clear()
            if self._owned_close is not None:
                self._owned_close()
                self._owned_close = None
                self._engine = None

    def gold(self, executor: Any, graph: str, gold_cypher: str) -> _Gold:
        key = (id(executor), graph, gold_cypher)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        entry = _Gold(executor.run(gold_cypher, graph), order_matters(gold_cypher))
        if entry.execution.error_type != ENVIRONMENT:  # the engine may come back: do not cache outages
            self._cache.put(key, entry)
        return entry

    def __call__(self, example: Any, pred: Any) -> Verdict:
        require_fields(example, ("gold_cypher", "graph"), "cypher_execution_metric")
        graph, source = resolve_graph(str(get_field(example, "graph")), get_field(example, "graph_source") or None)
        if source is not None and not isinstance(source, Mapping) and not os.path.isfile(str(source)):
            raise FileNotFoundError(f"cypher_execution_metric: graph_source not found: {source}")
        gold_cypher = str(get_field(example, "gold_cypher"))
        try:
            executor = self.engine(graph)
        except LookupError as exc:
            return Verdict(0.0, f"EnvironmentError: {exc}; this example cannot be scored.")
        ensure_loaded(executor, graph, source)
        gold = self.gold(executor, graph, gold_cypher)
        if not gold.execution.ok or gold.execution.truncated:
            if gold.execution.error_type == ENVIRONMENT:
                return Verdict(0.0, f"EnvironmentError: {gold.execution.error_message}; this example cannot be scored.")
            why = "overflows the row cap" if gold.execution.ok else f"fails with {gold.execution.error_type}"
            logger.warning("gold Cypher %s on graph %s (%s): %s", why, graph, gold.execution.describe(), gold_cypher)
            note = f" {gold.execution.describe()}. Gold Cypher: {gold_cypher}" if self.reveal_expected else ""
            return Verdict(0.0, f"gold query failed: the reference query {why}; this example cannot be scored.{note}")
        try:
            pred_cypher = extract_code(prediction_text(pred, "cypher"), "cypher")
            if pred_cypher.strip() and pred_cypher.strip() == gold_cypher.strip():
                return Verdict(1.0, f"Correct: the query {gold.execution.describe(max_rows=0)}, matching the expected result.")
            executed = executor.run(pred_cypher, graph)
            return cypher_verdict(executed, gold.execution, gold.order_matters, self.reveal_expected, gold_cypher)
        except Exception as exc:  # noqa: BLE001 - a prediction must get a score, whatever its text
            logger.warning("judging a Cypher prediction failed unexpectedly", exc_info=True)
            return Verdict(0.0, f"The prediction could not be judged: {type(exc).__name__}: {exc}"[:500])


def cypher_verdict(
    pred: Execution, gold: Execution, order_matters: bool, reveal_expected: bool = False, gold_cypher: str = ""
) -> Verdict:
    """Score a prediction's execution against the gold execution and explain the outcome."""
    if not pred.ok:
        if pred.error_type == EMPTY_PROGRAM:
            return Verdict(0.0, "EmptyProgram: the answer contained no Cypher query.")
        engine = pred.details.get("engine")
        where = f" on the {'FalkorDB' if engine == 'falkordb' else 'Neo4j'} engine" if engine else ""
        return Verdict(0.0, f"The query failed{where} with {pred.error_type}: {pred.error_message}")
    if pred.truncated:
        return Verdict(0.0, f"The query {pred.describe(max_rows=0)}; the result is too large to be the expected one.")
    if result_eq(pred.rows, gold.rows, order_matters):
        return Verdict(1.0, f"Correct: the query {pred.describe(max_rows=0)}, matching the expected result.")
    differs = describe_difference(pred.rows, gold.rows, pred.column_count, gold.column_count, order_matters=order_matters)
    feedback = f"The query ran but its result differs from the expected one ({differs}). It {pred.describe(max_rows=3)}."
    if reveal_expected:
        feedback += f" Expected: {gold.describe(max_rows=5)}. Gold Cypher: {gold_cypher}"
    return Verdict(0.0, feedback)


def cypher_execution_metric(
    engine: Any = None, timeout_s: float = 120.0, reveal_expected: bool = False, max_rows: int = 100_000,
    prediction_field: str | None = None,
) -> ExecutionMetric:
    """A DSPy metric scoring Cypher by execution (CypherBench EX): 1.0 when the results match."""
    judge = CypherJudge(engine, timeout_s, max_rows, reveal_expected)
    metric = ExecutionMetric(judge, name="cypher_execution", language="cypher", close=judge.close,
                             prediction_field=prediction_field)
    return metric
