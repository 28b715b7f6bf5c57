"""The Cypher test-time environment and the graph schema text, with no gold anywhere.

HERO-T grounds a Cypher refinement in the graph itself: which labels and relationship types exist
(a model often guesses ``:ACTED_IN`` where the graph says ``:actedIn``), which properties a label has
and of what type, how values are spelled (``sample_values``), and what a piece of the candidate
returns (``run_subquery``). Every probe is a read-only query through the same executor as the
candidates, so probes are as safe and time-limited as programs.

The schema is read from samples (up to `SAMPLE` nodes per label and relationships per type), so it
stays cheap on large graphs; a property present only outside the sample is not listed.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Any, Self

from dspy_hero.execution.base import SYNTAX, Execution, ProbeResult
from dspy_hero.execution.cypher_graphs import quote_name
from dspy_hero.execution.falkordb_executor import FalkorDBExecutor
from dspy_hero.execution.neo4j_executor import Neo4jExecutor, Neo4jSettings
from dspy_hero.text import extract_code

__all__ = ["CypherEnvironment", "default_engine", "graph_schema_text", "resolve_graph"]

log = logging.getLogger(__name__)

SAMPLE = 1000
_TYPE_FUNCTIONS = ("typeOf", "valueType")  # FalkorDB, Neo4j 5


def neo4j_configured() -> bool:
    """Whether a Neo4j server is configured (HERO_NEO4J_URI, read by `Neo4jSettings.from_env`)."""
    return Neo4jSettings.from_env() is not None


def default_engine(timeout_s: float = 120.0, max_rows: int = 100_000) -> Any:
    """Neo4j when HERO_NEO4J_URI is set, else a new embedded FalkorDB executor (the caller owns it)."""
    if neo4j_configured():
        return Neo4jExecutor.from_env(timeout_s=timeout_s, max_rows=max_rows)
    return FalkorDBExecutor(timeout_s=timeout_s, max_rows=max_rows)


def resolve_graph(graph: str | None, graph_source: Any = None) -> tuple[str, Any]:
    """(graph name, source or None). A graph given as an existing file path names itself by its stem."""
    source = graph_source or None
    if graph is None or not str(graph).strip():
        if source is None:
            raise ValueError("a Cypher environment needs a graph name or a graph_source")
        graph = Path(str(source)).name.split(".")[0]
    graph = str(graph)
    if source is None and os.path.isfile(graph):
        source, graph = graph, Path(graph).name.split(".")[0]
    return graph, source


def ensure_loaded(executor: Any, graph: str, source: Any) -> None:
    """Load `source` as `graph` into an embedded executor unless it is already there (thread-safe)."""
    if source is None or not hasattr(executor, "load_graph") or graph in executor.graph_names():
        return
    try:
        executor.load_graph(graph, source)
    except ValueError:
        if graph not in executor.graph_names():  # not a lost race with another loader: a real error
            raise


def _values(execution: Execution, column: int = 0) -> list:
    return [row[column] for row in execution.rows or ()]


def _typed_keys(run, match: str, var: str) -> dict[str, str]:
    """Property keys of sampled entities with their value types (types omitted if the engine has no type function)."""
    for fn in _TYPE_FUNCTIONS:
        result = run(f"{match} WITH {var} LIMIT {SAMPLE} UNWIND keys({var}) AS k RETURN DISTINCT k, {fn}({var}[k])")
        if result.ok:
            types: dict[str, set[str]] = {}
            for key, kind in result.rows or ():
                types.setdefault(str(key), set()).add(str(kind).upper().replace(" NOT NULL", ""))
            return {k: "|".join(sorted(v)) for k, v in sorted(types.items())}
        if result.error_type != SYNTAX:
            break
    result = run(f"{match} WITH {var} LIMIT {SAMPLE} UNWIND keys({var}) AS k RETURN DISTINCT k")
    return {str(k): "" for k in sorted(_values(result), key=str)}


def _props_text(props: dict[str, str]) -> str:
    if not props:
        return ""
    return " {" + ", ".join(f"{k}: {t}" if t else k for k, t in props.items()) + "}"


def graph_schema_text(executor: Any, graph: str | None = None) -> str:
    """The graph schema as text for an example's ``graph_schema`` field.

    One line per label with its property types, then one line per relationship pattern
    ``(:A)-[:T {props}]->(:B)``, all sorted, in the same shape as the CypherBench task's schema text.
    """
    def run(query: str) -> Execution:
        return executor.run(query, graph)

    labels = run("CALL db.labels()")
    if not labels.ok:
        raise RuntimeError(f"cannot read the schema of graph {graph!r}: {labels.describe()}")
    lines = ["Node labels and properties:"]
    for label in sorted(map(str, _values(labels))):
        props = _typed_keys(run, f"MATCH (n:{quote_name(label)})", "n")
        lines.append(f"  (:{label}{_props_text(props)})")
    lines.append("Relationship types:")
    for rel_type in sorted(map(str, _values(run("CALL db.relationshipTypes()")))):
        pattern = f"MATCH (a)-[r:{quote_name(rel_type)}]->(b)"
        ends = run(f"{pattern} WITH a, b LIMIT {SAMPLE} RETURN DISTINCT labels(a), labels(b)")
        props = _props_text(_typed_keys(run, f"MATCH ()-[r:{quote_name(rel_type)}]->()", "r"))
        pairs = sorted({(":".join(a), ":".join(b)) for a, b in ends.rows or ()}) or [("", "")]
        for start, end in pairs:
            left = f"(:{start})" if start else "()"
            right = f"(:{end})" if end else "()"
            lines.append(f"  {left}-[:{rel_type}{props}]->{right}")
    return "\n".join(lines)


class CypherEnvironment:
    """One property graph as HERO-T's environment (language ``"cypher"``).

    `executor` (alias `engine`) is any Cypher executor with ``run(cypher, graph)``; when omitted the
    environment starts its own (Neo4j from HERO_NEO4J_URI, else an embedded FalkorDB server) and
    closes it in `close()` or when collected. `graph_source` (a Cypher script or JSON path) is loaded
    into an embedded executor if the graph is not there yet. Safe to use from several threads.
    """

    language = "cypher"

    def __init__(
        self,
        executor: Any = None,
        graph: str | None = None,
        *,
        graph_source: Any = None,
        engine: Any = None,
        timeout_s: float = 120.0,
        max_rows: int = 100_000,
    ):
        self.graph, source = resolve_graph(graph, graph_source)
        executor = executor if executor is not None else engine
        self._owned = executor is None
        self.executor = default_engine(timeout_s, max_rows) if executor is None else executor
        self._close = weakref.finalize(self, self.executor.close) if self._owned else None
        try:
            ensure_loaded(self.executor, self.graph, source)
        except BaseException:
            self.close()
            raise
        self.timeout_s = float(timeout_s)
        self._schema: str | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"CypherEnvironment(graph={self.graph!r}, executor={self.executor!r})"

    def close(self) -> None:
        """Stop the engine if this environment started it."""
        if self._close is not None:
            self._close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self, cypher: str) -> Execution:
        return self.executor.run(cypher, self.graph)

    def execute(self, program: str) -> Execution:
        return self._run(extract_code(program, "cypher"))

    def probes(self) -> dict[str, str]:
        return {
            "schema": "no argument: node labels with property types and relationship patterns",
            "labels": "no argument: the node labels",
            "relationship_types": "no argument: relationship types with the labels they connect",
            "property_keys": "a label (or nothing for every label): its property names and types",
            "sample_values": "'Label.property': a few distinct non-null values, as stored",
            "run_subquery": "a read-only Cypher query: runs it and describes the result",
        }

    def probe(self, name: str, argument: str = "") -> ProbeResult:
        argument = (argument or "").strip()
        handler = {
            "schema": lambda _: self.schema(),
            "labels": self._labels_text,
            "relationship_types": self._relationships_text,
            "property_keys": self._property_keys_text,
            "sample_values": self._sample_values_text,
        }.get(name)
        if name == "run_subquery":
            result = self.execute(argument)
            return ProbeResult(name, argument, result.describe(max_rows=5, max_chars=800), ok=result.ok)
        if handler is None:
            return ProbeResult(name, argument, f"unknown probe {name!r}; available: {sorted(self.probes())}", ok=False)
        try:
            return ProbeResult(name, argument, handler(argument))
        except (LookupError, RuntimeError) as exc:
            return ProbeResult(name, argument, str(exc), ok=False)

    def check(self, program: str, execution: Execution) -> tuple[bool, str]:
        """Gate a candidate: it ran, its result is complete, and it returned at least one column."""
        if not execution.ok:
            return False, f"execution failed: {execution.describe()}"
        if execution.truncated:
            return False, "the result exceeded the row cap (truncated)"
        if execution.column_count == 0:
            return False, "the query returned no columns"
        return True, "executed without error"

    # --- probes ---------------------------------------------------------------------------------------

    def schema(self) -> str:
        with self._lock:
            if self._schema is None:
                self._schema = graph_schema_text(self.executor, self.graph)
            return self._schema

    def _list(self, query: str) -> list[str]:
        result = self._run(query)
        if not result.ok:
            raise RuntimeError(result.describe())
        return sorted(str(v) for v in _values(result))

    def _labels_text(self, _: str = "") -> str:
        labels = self._list("CALL db.labels()")
        return "Node labels: " + (", ".join(labels) if labels else "(none: the graph is empty)")

    def _relationships_text(self, _: str = "") -> str:
        lines = [line.strip() for line in self.schema().split("Relationship types:", 1)[-1].splitlines() if line.strip()]
        return "Relationship types:\n  " + "\n  ".join(lines) if lines else "Relationship types: (none)"

    def _resolve_label(self, name: str) -> str:
        labels = self._list("CALL db.labels()")
        wanted = name.strip().lstrip(":").strip("`")
        match = next((lab for lab in labels if lab == wanted), None) or next(
            (lab for lab in labels if lab.lower() == wanted.lower()), None
        )
        if match is None:
            raise LookupError(f"no label {wanted!r}; labels: {labels}")
        return match

    def _property_keys_text(self, argument: str) -> str:
        labels = [self._resolve_label(argument)] if argument else self._list("CALL db.labels()")
        lines = []
        for label in labels:
            props = _typed_keys(self._run, f"MATCH (n:{quote_name(label)})", "n")
            lines.append(f"(:{label}{_props_text(props) or ' (no properties)'})")
        return "\n".join(lines) or "(the graph has no labels)"

    def _sample_values_text(self, argument: str, limit: int = 8) -> str:
        if "." not in argument:
            raise LookupError("expected 'Label.property', e.g. 'Person.name'")
        label_part, prop = argument.rsplit(".", 1)
        label, prop = self._resolve_label(label_part), prop.strip().strip("`")
        var = f"n.{quote_name(prop)}"
        result = self._run(
            f"MATCH (n:{quote_name(label)}) WHERE {var} IS NOT NULL RETURN DISTINCT {var} LIMIT {int(limit)}"
        )
        if not result.ok:
            raise RuntimeError(result.describe())
        values = [_show(v) for v in _values(result)]
        if not values:
            return f"{label}.{prop} holds no non-null values (is the property name right? see property_keys)"
        return f"{label}.{prop} sample values: " + ", ".join(values)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
