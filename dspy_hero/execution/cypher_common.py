"""What both Cypher executors share: CypherBench-style values, query preparation, and binding an
executor to one graph.

`to_plain` turns engine objects into plain data the way CypherBench's ``record.data()`` does;
`normalize_result` then applies `normalize_cell`, so FalkorDB and Neo4j results compare alike.
`prepare_query` refuses empty programs, text that is not valid Unicode (lone surrogates cannot be
sent), pathological nesting (`complexity_violation`: it hangs or crashes FalkorDB's parser) and
anything `read_only_violation` forbids, before an engine sees it.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from dspy_hero.execution.base import EMPTY_PROGRAM, REJECTED, RESOURCE, SYNTAX, Execution, failed
from dspy_hero.execution.cypher_graphs import code_skeleton, complexity_violation, read_only_violation
from dspy_hero.metrics.compare import normalize_cell

__all__ = ["BoundCypherExecutor", "normalize_result", "prepare_query", "to_plain"]


def to_plain(value: Any) -> Any:
    """Engine objects as plain Python data, as CypherBench's ``record.data()`` sees them.

    A node becomes its property map (labels and ids dropped), a relationship ``(type, properties)``
    (FalkorDB only reports endpoint ids, which are not comparable across loads), a path the list of its
    nodes and relationships; durations become ISO 8601 strings. `normalize_cell` does the rest.
    """
    mod = type(value).__module__
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if mod.startswith("falkordb"):
        name = type(value).__name__
        if name == "Node":
            return {k: to_plain(v) for k, v in (value.properties or {}).items()}
        if name == "Edge":
            return (value.relation, {k: to_plain(v) for k, v in (value.properties or {}).items()})
        if name == "Path":
            items = []
            for i, node in enumerate(value.nodes()):
                items.append(to_plain(node))
                if i < len(value.edges()):
                    items.append(to_plain(value.edges()[i]))
            return items
    if mod.startswith("neo4j"):
        name = type(value).__name__
        if name == "Node":
            return {k: to_plain(v) for k, v in dict(value).items()}
        if name == "Relationship":
            return (value.type, {k: to_plain(v) for k, v in dict(value).items()})
        if name == "Path":
            items = []
            for i, node in enumerate(value.nodes):
                items.append(to_plain(node))
                if i < len(value.relationships):
                    items.append(to_plain(value.relationships[i]))
            return items
    if mod.startswith("dateutil") and type(value).__name__ == "relativedelta":
        return _iso_duration(value)
    if isinstance(value, _dt.timedelta):
        return f"PT{value.total_seconds():g}S"
    if isinstance(value, Mapping):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def _iso_duration(rd: Any) -> str:
    date = "".join(f"{int(n)}{u}" for n, u in ((rd.years, "Y"), (rd.months, "M"), (rd.days, "D")) if n)
    clock = "".join(
        f"{n:g}{u}" for n, u in ((rd.hours, "H"), (rd.minutes, "M"), (rd.seconds + rd.microseconds / 1e6, "S")) if n
    )
    return "P" + date + (("T" + clock) if clock else "") if (date or clock) else "PT0S"


def normalize_result(rows: list) -> tuple[tuple[Any, ...], ...]:
    return tuple(tuple(normalize_cell(to_plain(cell)) for cell in row) for row in rows)


def prepare_query(cypher: Any) -> tuple[str, Execution | None]:
    """The query text to send (one trailing ``;`` dropped), or a failed Execution saying why not."""
    text = (cypher if isinstance(cypher, str) else "" if cypher is None else str(cypher)).strip()
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return "", failed(SYNTAX, f"the query is not valid Unicode text ({exc.reason} at character {exc.start})")
    too_big = complexity_violation(text)
    if too_big:
        return "", failed(RESOURCE, f"refused before execution: {too_big}")
    if not code_skeleton(text).strip(" \t\r\n;"):
        return "", failed(EMPTY_PROGRAM, "empty Cypher query")
    text = text.removesuffix(";").rstrip()
    why = read_only_violation(text)
    if why:
        return "", failed(REJECTED, f"refused before execution: {why}")
    return text, None


class BoundCypherExecutor:
    """A Cypher executor bound to one graph, satisfying the `Executor` protocol."""

    def __init__(self, executor: Any, graph: str | None):
        self.executor = executor
        self.graph = graph

    def run(self, program: str) -> Execution:
        return self.executor.run(program, self.graph)

    def __repr__(self) -> str:
        return f"BoundCypherExecutor({self.executor!r}, graph={self.graph!r})"
