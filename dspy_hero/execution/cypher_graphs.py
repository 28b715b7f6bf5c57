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
# ``CALL`x`(...)`` needs no space after CALL (a backticked name is blanked to `_`, never allowed)
_CALL = re.compile(r"\bCALL\s*(?!\{)([^\s(]+)", re.IGNORECASE)

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


# FalkorDB's parser takes time exponential in nesting depth (about x2 per level: a list nested 18
# deep parses in 0.8 s, 20 deep in 3.4 s, and a paren or unary-minus chain grows faster), no engine
# timeout covers parsing, and ~50,000 levels overflow its stack and kill the server. CypherBench's
# gold queries nest at most 3 deep, so these bounds refuse only pathological text.
MAX_QUERY_CHARS = 100_000
MAX_NESTING = 12
MAX_NESTING_COST = 1 << 16  # sum of 2**depth over every nesting step: many moderately deep terms
_TOKEN = re.compile(r"[(\[{]|[)\]}]|,|[A-Za-z_][A-Za-z_0-9]*|\d+(?:\.\d*)?|'[^']*'|`[^`]*`|[-+]|[^\s\w]")
_OPERAND_END = re.compile(r"[A-Za-z_0-9'`)\]}]$")
_PREFIX_CONTEXT_WORDS = frozenset(
    {"return", "where", "and", "or", "xor", "not", "when", "then", "else", "in", "with", "case", "unwind",
     "as", "by", "set", "skip", "limit", "is", "contains", "starts", "ends"}
)


def complexity_violation(cypher: str) -> str | None:
    """Why this query is too long or too deeply nested to hand to the engine (None when it is fine).

    Nesting counts brackets (``(``, ``[``, ``{``) and prefix operators (unary ``-``/``+``, ``NOT``),
    each of which opens a level of the parse tree that lasts until its bracket closes or, for a prefix
    operator, until the next comma or binary operator at its level.
    """
    if len(cypher) > MAX_QUERY_CHARS:
        return f"the query is {len(cypher):,} characters long (at most {MAX_QUERY_CHARS:,})"
    skeleton = code_skeleton(cypher)
    openers = sum(skeleton.count(c) for c in "([{-+") + skeleton.lower().count("not")
    if openers <= MAX_NESTING:  # depth <= openers and cost <= openers * 2**openers: nothing to find
        return None
    levels = [0]  # prefix operators pending at each bracket level
    depth = deepest = cost = 0
    previous = ""
    for token in _TOKEN.findall(skeleton):
        low = token.lower()
        if token in "([{":
            levels.append(0)
            depth += 1
        elif token in ")]}":
            if len(levels) > 1:
                depth -= 1 + levels.pop()
            previous = token
            continue
        elif token in "-+" or low == "not":
            operand_expected = not previous or not _OPERAND_END.search(previous) or previous.lower() in _PREFIX_CONTEXT_WORDS
            if not operand_expected:  # a binary + or -: the prefix chain at this level ends
                depth -= levels[-1]
                levels[-1] = 0
                previous = token
                continue
            levels[-1] += 1
            depth += 1
        elif token == "," or (not token[0].isalnum() and token not in "'`_" and token != "."):
            depth -= levels[-1]  # a comma or an operator ends the prefix chain at this level
            levels[-1] = 0
            previous = token
            continue
        else:
            previous = token
            continue
        previous = token
        deepest = max(deepest, depth)
        cost += 1 << min(depth, 40)
        if deepest > MAX_NESTING:
            return (
                f"the query nests expressions more than {MAX_NESTING} deep (brackets and prefix operators); "
                "the engine's parser needs time exponential in the depth"
            )
        if cost > MAX_NESTING_COST:
            return (
                "the query holds too many deeply nested expressions (the sum of 2**depth over its nesting "
                f"passes {MAX_NESTING_COST:,}); the engine's parser needs time exponential in the depth"
            )
    return None
