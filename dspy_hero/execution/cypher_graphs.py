"""Graph sources for the embedded engine, and a lexical look at Cypher text.

A graph source is either a Cypher script (``CREATE`` statements separated by ``;``) or a JSON document
``{"nodes": [{"id", "labels", "properties"}], "edges": [{"source", "target", "type", "properties"}]}``
(a path to a ``.json`` file or the dict itself). Parsing is pure and engine-independent, so a bad
source fails with a clear message before the engine is touched.

The lexical helpers blank out string literals and comments, so checks on keywords (``LOAD CSV``,
``CALL proc``, ``;``) never fire on text inside a string and cannot be dodged by hiding a keyword
in a comment.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRIMITIVES = (str, int, float, bool)


@dataclass(frozen=True)
class GraphSource:
    """A parsed graph: either script statements or JSON nodes and edges (never both)."""

    origin: str
    statements: tuple[str, ...] = ()
    nodes: tuple[dict, ...] = ()
    edges: tuple[dict, ...] = ()
    meta: dict = field(default_factory=dict)

    @property
    def is_empty(self) -> bool:
        return not self.statements and not self.nodes


def _scan(text: str):
    """Yield (kind, chunk) pieces: 'code', 'string', 'ident' (backticked), 'comment'."""
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if c in "'\"`":
            if i > start:
                yield "code", text[start:i]
            j = i + 1
            while j < n:
                if text[j] == "\\" and c != "`":
                    j += 2
                    continue
                if text[j] == c:
                    if c == "`" and j + 1 < n and text[j + 1] == "`":  # `` escapes a backtick
                        j += 2
                        continue
                    break
                j += 1
            yield ("ident" if c == "`" else "string"), text[i : j + 1]
            i = start = j + 1
        elif text.startswith("//", i) or text.startswith("/*", i):
            if i > start:
                yield "code", text[start:i]
            end = text.find("\n", i) if text[i + 1] == "/" else text.find("*/", i + 2)
            j = n if end < 0 else (end if text[i + 1] == "/" else end + 2)
            yield "comment", text[i:j]
            i = start = j
        else:
            i += 1
    if start < n:
        yield "code", text[start:]


def code_skeleton(cypher: str) -> str:
    """The query with strings replaced by ``''``, backticked names by ``` `_` ``` and comments by a space."""
    out = []
    for kind, chunk in _scan(cypher):
        out.append({"code": chunk, "string": "''", "ident": "`_`", "comment": " "}[kind])
    return "".join(out)


def split_statements(script: str) -> list[str]:
    """Split a Cypher script on top-level ``;`` (not inside strings, names or comments)."""
    statements, current = [], []
    for kind, chunk in _scan(script):
        if kind == "comment":
            current.append(" ")
            continue
        if kind != "code":
            current.append(chunk)
            continue
        parts = chunk.split(";")
        current.append(parts[0])
        for part in parts[1:]:
            statements.append("".join(current))
            current = [part]
    statements.append("".join(current))
    return [s.strip() for s in statements if s.strip()]


def quote_name(name: str) -> str:
    """A label, relationship type or property name as a backticked Cypher identifier."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"labels, types and property names must be non-empty strings, got {name!r}")
    return "`" + name.replace("`", "``") + "`"


def _check_properties(props: Any, where: str) -> dict:
    if props is None:
        return {}
    if not isinstance(props, Mapping):
        raise ValueError(f"{where}: 'properties' must be an object, got {type(props).__name__}")  # noqa: TRY004
    for key, value in props.items():
        if not isinstance(key, str) or not key or "`" in key:
            raise ValueError(f"{where}: property name {key!r} must be a non-empty string without backticks")
        ok = value is None or isinstance(value, PRIMITIVES) or (
            isinstance(value, list) and all(isinstance(v, PRIMITIVES) for v in value)
        )
        if not ok or (isinstance(value, float) and not math.isfinite(value)):
            raise ValueError(f"{where}: property {key!r} has unsupported value {value!r} (use strings, numbers, booleans or lists of them)")
    return {k: v for k, v in props.items() if v is not None}


def parse_json_graph(data: Mapping, origin: str = "<dict>") -> GraphSource:
    """Validate a nodes/edges document. Errors name the offending node or edge."""
    if not isinstance(data, Mapping) or "nodes" not in data:
        raise ValueError(f"{origin}: a JSON graph needs a 'nodes' list (and optionally 'edges')")
    nodes, ids = [], set()
    for i, node in enumerate(data.get("nodes") or []):
        where = f"{origin}: nodes[{i}]"
        if not isinstance(node, Mapping) or "id" not in node:
            raise ValueError(f"{where} needs an 'id'")
        key = json.dumps(node["id"], sort_keys=True)
        if key in ids:
            raise ValueError(f"{where}: duplicate node id {node['id']!r}")
        ids.add(key)
        labels = node.get("labels") or []
        labels = [labels] if isinstance(labels, str) else list(labels)
        for label in labels:
            quote_name(label)
        nodes.append({"id": key, "labels": tuple(sorted(set(labels))), "properties": _check_properties(node.get("properties"), where)})
    edges = []
    for i, edge in enumerate(data.get("edges") or data.get("relationships") or []):
        where = f"{origin}: edges[{i}]"
        if not isinstance(edge, Mapping) or not {"source", "target", "type"} <= set(edge):
            raise ValueError(f"{where} needs 'source', 'target' and 'type'")
        src, dst = json.dumps(edge["source"], sort_keys=True), json.dumps(edge["target"], sort_keys=True)
        for end, value in (("source", src), ("target", dst)):
            if value not in ids:
                raise ValueError(f"{where}: {end} {edge[end]!r} is not a node id")
        quote_name(edge["type"])
        edges.append({"source": src, "target": dst, "type": edge["type"], "properties": _check_properties(edge.get("properties"), where)})
    return GraphSource(origin=origin, nodes=tuple(nodes), edges=tuple(edges))


def read_graph_source(source: str | Path | Mapping) -> GraphSource:
    """Parse a path (``.json`` → nodes/edges, anything else → Cypher script) or a dict."""
    if isinstance(source, Mapping):
        return parse_json_graph(source)
    path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"graph source {str(path)!r} does not exist or is not a file")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: invalid JSON: {exc}") from exc
        return parse_json_graph(data, origin=str(path))
    statements = split_statements(text)
    return GraphSource(origin=str(path), statements=tuple(statements))


_LOAD_CSV = re.compile(r"\bLOAD\s+CSV\b", re.IGNORECASE)
_CALL = re.compile(r"\bCALL\s+(?!\{)([^\s(]+)", re.IGNORECASE)

# Procedures that only read the graph. Anything else in a CALL is refused before it reaches the engine:
# read-only transactions already refuse procedures declared as writes, but some "read" procedures
# elsewhere reach files or the network (apoc.load.*, apoc.export.*), so we allow by name, not by mode.
READ_PROCEDURES = frozenset(
    name.lower()
    for name in (
        "db.labels", "db.relationshipTypes", "db.propertyKeys", "db.indexes", "db.constraints",
        "db.meta.stats", "dbms.procedures", "dbms.functions", "dbms.components",
        "db.schema.visualization", "db.schema.nodeTypeProperties", "db.schema.relTypeProperties",
        "db.idx.fulltext.queryNodes", "db.idx.fulltext.queryRelationships",
        "db.idx.vector.queryNodes", "db.idx.vector.queryRelationships",
        "db.index.fulltext.queryNodes", "db.index.fulltext.queryRelationships",
        "apoc.meta.data", "apoc.meta.schema", "apoc.meta.stats",
        "apoc.meta.nodeTypeProperties", "apoc.meta.relTypeProperties",
    )
)
READ_PROCEDURE_PREFIXES = ("algo.",)  # FalkorDB's graph algorithms (pageRank, BFS, WCC, ...) only read


def read_only_violation(cypher: str) -> str | None:
    """Why this query is refused before execution (None when it may run).

    Refuses more than one statement, ``LOAD CSV`` (reads files or URLs) and any procedure not known
    to be read-only. Writes by clause (CREATE, MERGE, SET, DELETE, REMOVE, FOREACH) are left to the
    engine's read-only mode, which parses the query properly.
    """
    skeleton = code_skeleton(cypher).strip()
    skeleton = skeleton.removesuffix(";")
    if ";" in skeleton:
        return "only one statement is allowed"
    if _LOAD_CSV.search(skeleton):
        return "LOAD CSV is not allowed (it reads files or URLs)"
    for name in _CALL.findall(skeleton):
        lowered = name.lower()
        if lowered not in READ_PROCEDURES and not lowered.startswith(READ_PROCEDURE_PREFIXES):
            return f"procedure {name!r} is not on the list of read-only procedures"
    return None
