"""Diagnosis of Cypher programs: the query's patterns checked against the graph, the result's shape,
and — for TRAINING cases only — the labels and relationship types the reference uses.

The graph side comes from the environment's own schema text (one line per label with its
properties, one per relationship pattern ``(:A)-[:T {props}]->(:B)``), so the checks see exactly what
HERO-T's schema probe shows. The query side is read from its text: node patterns ``(v:Label {k: ..})``,
relationship patterns with their direction, and property reads ``v.key``. There is no Cypher parser
among our dependencies, so patterns are found with a tokenizer that skips string literals and
comments; a query it cannot read still gets the engine's error and the result facts.

Checked: unknown labels / relationship types (with the graph's spelling when it differs only in
case or a few letters), a relationship traversed against its direction, a relationship between
labels it never connects, a property no label of the variable has (and which labels have it), an
engine syntax error with its position, empty results and NULL-only columns.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from dspy_hero.diagnosis.common import error_fact, feedback_property, first_error_location, result_facts
from dspy_hero.diagnosis.facts import Category, Diagnosis, Fact
from dspy_hero.execution.base import Execution
from dspy_hero.metrics.base import extract_code

__all__ = ["GraphSchema", "QueryPatterns", "diagnose_cypher", "parse_graph_schema", "query_patterns"]

_LABEL_LINE = re.compile(r"^\s*\(:([^\s{)]+)(?:\s*\{([^}]*)\})?\)\s*$")
_REL_LINE = re.compile(r"^\s*\((?::([^)]*))?\)-\[:([^\s{\]]+)(?:\s*\{([^}]*)\})?\]->\((?::([^)]*))?\)\s*$")
_STRINGS = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|//[^\n]*|/\*.*?\*/", re.DOTALL)
_NAME = r"(?:`[^`]+`|[A-Za-z_][A-Za-z0-9_]*)"
_NODE = re.compile(rf"\(\s*({_NAME})?\s*((?::\s*{_NAME}\s*)*)(\{{[^}}]*\}})?\s*\)")
_REL = re.compile(rf"(<)?-\[\s*({_NAME})?\s*(:\s*[^\]{{*]*)?(\*[^\]{{]*)?(\{{[^}}]*\}})?\s*\]-(>)?")
_PROP_READ = re.compile(rf"(?<![\w.`])({_NAME})\.({_NAME})")
_MAP_KEY = re.compile(rf"({_NAME})\s*:")


def _bare(name: str) -> str:
    return name.strip().strip("`")


@dataclass
class GraphSchema:
    """Labels with their property keys, and relationship types with their (start, end) label pairs
    and property keys, as the environment's schema text lists them."""

    labels: dict[str, set[str]] = field(default_factory=dict)
    relationships: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    relationship_props: dict[str, set[str]] = field(default_factory=dict)

    def labels_with(self, prop: str) -> list[str]:
        return sorted(lab for lab, props in self.labels.items() if prop in props)


def parse_graph_schema(text: str) -> GraphSchema:
    """`GraphSchema` from `dspy_hero.execution.cypher_environment.graph_schema_text` output."""
    schema = GraphSchema()
    for line in (text or "").splitlines():
        m = _REL_LINE.match(line)
        if m:
            start, rel, props, end = m.group(1) or "", m.group(2), m.group(3) or "", m.group(4) or ""
            schema.relationships.setdefault(rel, set()).add((start, end))
            schema.relationship_props.setdefault(rel, set()).update(_keys(props))
            continue
        m = _LABEL_LINE.match(line)
        if m:
            schema.labels.setdefault(m.group(1), set()).update(_keys(m.group(2) or ""))
    return schema


def _keys(props: str) -> set[str]:
    return {p.split(":")[0].strip() for p in props.split(",") if p.strip()}


@dataclass
class QueryPatterns:
    """What a query names: variables with their labels, relationship hops (start var, types, end var,
    direction), property reads per variable, and whether it returns DISTINCT rows."""

    node_labels: dict[str, set[str]] = field(default_factory=dict)  # variable ('' for anonymous) -> labels
    labels: list[str] = field(default_factory=list)
    hops: list[tuple[set[str], list[str], set[str], str]] = field(default_factory=list)  # (start labels, types, end labels, '->'|'<-'|'-')
    rel_vars: dict[str, list[str]] = field(default_factory=dict)
    reads: list[tuple[str, str]] = field(default_factory=list)  # (variable, property)
    distinct: bool = False

    def line(self) -> str:
        types = sorted({t for _, ts, _, _ in self.hops for t in ts})
        return (f"labels {', '.join(f'`{lab}`' for lab in self.labels) or '(none)'}; relationships "
                f"{', '.join(f'`{t}`' for t in types) or '(none)'}; reads "
                f"{', '.join(f'`{v}.{p}`' for v, p in self.reads[:6]) or 'no property'}"
                + ("; RETURN DISTINCT" if self.distinct else ""))


def query_patterns(cypher: str) -> QueryPatterns:
    """The patterns of a query's text (string literals and comments blanked first)."""
    text = _STRINGS.sub(lambda m: " " * len(m.group(0)) if m.group(0).startswith(("/", "-")) else "''", cypher)
    out = QueryPatterns(distinct=bool(re.search(r"\bRETURN\s+DISTINCT\b", text, re.IGNORECASE)))
    nodes = list(_NODE.finditer(text))
    for m in nodes:
        var = _bare(m.group(1) or "")
        labels = [_bare(x) for x in (m.group(2) or "").split(":") if x.strip()]
        if var or labels:
            out.node_labels.setdefault(var, set()).update(labels)
        out.labels += [lab for lab in labels if lab not in out.labels]
        for key in _MAP_KEY.findall((m.group(3) or "")[1:-1]):
            if var:
                out.reads.append((var, _bare(key)))
    for m in _REL.finditer(text):
        before = next((n for n in reversed(nodes) if n.end() <= m.start() and not text[n.end():m.start()].strip()), None)
        after = next((n for n in nodes if n.start() >= m.end() and not text[m.end():n.start()].strip()), None)
        types = [_bare(t) for t in re.split(r"[|:]", (m.group(3) or "").strip()) if t.strip()]
        var = _bare(m.group(2) or "")
        if var:
            out.rel_vars[var] = types
        direction = "<-" if m.group(1) and not m.group(6) else "->" if m.group(6) and not m.group(1) else "-"
        out.hops.append((_node_labels(before, out), types, _node_labels(after, out), direction))
        for key in _MAP_KEY.findall((m.group(5) or "")[1:-1]):
            if var:
                out.reads.append((var, _bare(key)))
    out.reads += [(_bare(v), _bare(p)) for v, p in _PROP_READ.findall(text)]
    out.reads = list(dict.fromkeys(out.reads))
    return out


def _node_labels(match: re.Match | None, patterns: QueryPatterns) -> set[str]:
    if match is None:
        return set()
    var = _bare(match.group(1) or "")
    own = {_bare(x) for x in (match.group(2) or "").split(":") if x.strip()}
    return own | (patterns.node_labels.get(var, set()) if var else set())


def diagnose_cypher(program: str, execution: Execution | None, environment: Any, *, reference: str | None = None,
                    feedback: str | None = None) -> Diagnosis:
    """Facts about one Cypher run (see the module docstring); `environment` is a Cypher environment
    (with `execute` and `schema()`) or None."""
    query = extract_code(program, "cypher")
    if not query.strip():
        return Diagnosis("cypher", (Fact(Category.EMPTY_PROGRAM, "the answer contains no Cypher query"),))
    errors: list[str] = []
    if execution is None and environment is not None:
        execution = environment.execute(query)
    patterns = query_patterns(query)
    facts: list[Fact] = []
    if environment is not None:
        try:
            schema = parse_graph_schema(environment.schema())
        except Exception as exc:  # noqa: BLE001 - reported in Diagnosis.errors, never silent
            schema = None
            errors.append(f"graph schema unavailable ({type(exc).__name__}: {str(exc)[:160]})")
        if schema is not None:
            facts += graph_facts(patterns, schema)
    if execution is not None and not execution.ok:
        facts.append(error_fact(execution, first_error_location(execution.error_message or "")))
    elif execution is not None:
        facts += result_facts(execution, distinct=patterns.distinct)
        prop = feedback_property(feedback)
        if prop is not None and not (prop is Category.WRONG_ROW_COUNT and execution.row_count == 0):
            facts.append(Fact(prop, f"returns {execution.row_count} row(s) x {execution.column_count} column(s); "
                              f"the expected result differs ({prop.value})"))
    if reference is not None:
        facts += reference_facts(patterns, query_patterns(extract_code(reference, "cypher")))
    return Diagnosis("cypher", tuple(dict.fromkeys(facts)), patterns.line(), tuple(errors))


def _similar(name: str, pool: list[str]) -> list[str]:
    exact = [p for p in pool if p.lower() == name.lower()]
    close = difflib.get_close_matches(name.lower(), [p.lower() for p in pool], n=3, cutoff=0.6)
    return list(dict.fromkeys(exact + [p for p in pool if p.lower() in close]))


def _names(items: list[str] | set[str]) -> str:
    return ", ".join(f"`{x}`" for x in sorted(items)) or "(none)"


def graph_facts(patterns: QueryPatterns, schema: GraphSchema) -> list[Fact]:
    """The query's labels, relationship hops and property reads checked against the graph."""
    facts: list[Fact] = []
    labels = list(schema.labels)
    for lab in patterns.labels:
        if lab not in schema.labels:
            similar = _similar(lab, labels)
            facts.append(Fact(Category.UNKNOWN_LABEL, f"label `{lab}` is not in the graph"
                              + (f"; similar labels: {_names(similar)}" if similar else f"; labels: {_names(labels[:8])}")))
    types = list(schema.relationships)
    for start, rel_types, end, direction in patterns.hops:
        for rel in rel_types:
            if rel not in schema.relationships:
                similar = _similar(rel, types)
                facts.append(Fact(Category.UNKNOWN_RELATIONSHIP, f"relationship type `{rel}` is not in the graph"
                                  + (f"; similar types: {_names(similar)}" if similar else f"; types: {_names(types[:8])}")))
                continue
            facts += _hop_facts(rel, start & set(labels), end & set(labels), direction, schema)
    for var, prop in patterns.reads:
        facts += _read_facts(var, prop, patterns, schema)
    return facts


def _hop_facts(rel: str, start: set[str], end: set[str], direction: str, schema: GraphSchema) -> list[Fact]:
    pairs = schema.relationships[rel]
    if direction == "<-":
        start, end = end, start
    if not start and not end:
        return []

    def fits(s: set[str], e: set[str]) -> bool:
        return any((not s or a in s) and (not e or b in e) for a, b in pairs)

    if fits(start, end) or (direction == "-" and fits(end, start)):
        return []
    shown = ", ".join(f"(:{a})-[:{rel}]->(:{b})" for a, b in sorted(pairs)[:3])
    asked = f"(:{'|'.join(sorted(start)) or ''})-[:{rel}]->(:{'|'.join(sorted(end)) or ''})"
    if fits(end, start):
        return [Fact(Category.WRONG_DIRECTION, f"the query follows {asked}, but the graph has {shown} (reversed)")]
    return [Fact(Category.WRONG_ENDPOINTS, f"the query uses {asked}, but `{rel}` only connects {shown}")]


def _read_facts(var: str, prop: str, patterns: QueryPatterns, schema: GraphSchema) -> list[Fact]:
    if var in patterns.node_labels:
        known = [lab for lab in patterns.node_labels[var] if lab in schema.labels]
        if not known or any(prop in schema.labels[lab] for lab in known):
            return []
        holders = schema.labels_with(prop)
        props = sorted(set().union(*(schema.labels[lab] for lab in known)))
        text = f"`{'/'.join(known)}` has no property `{prop}` (read as `{var}.{prop}`)"
        if holders:
            text += f"; labels that have it: {_names(holders)}"
        else:
            similar = _similar(prop, props)
            text += f"; {'similar' if similar else 'its'} properties: {_names(similar or props[:8])}"
        return [Fact(Category.UNKNOWN_PROPERTY, text)]
    if var in patterns.rel_vars:
        known = [t for t in patterns.rel_vars[var] if t in schema.relationships]
        if not known or any(prop in schema.relationship_props.get(t, set()) for t in known):
            return []
        props = sorted(set().union(*(schema.relationship_props.get(t, set()) for t in known)))
        return [Fact(Category.UNKNOWN_PROPERTY, f"relationship `{'/'.join(known)}` has no property `{prop}` "
                     f"(read as `{var}.{prop}`); its properties: {_names(props)}")]
    return []


def reference_facts(pred: QueryPatterns, ref: QueryPatterns) -> list[Fact]:
    """TRAINING cases only: labels and relationship types in the reference but not the prediction
    (and the reverse), and a DISTINCT difference."""
    facts = []
    p_types = {t for _, ts, _, _ in pred.hops for t in ts}
    r_types = {t for _, ts, _, _ in ref.hops for t in ts}
    missing = [lab for lab in ref.labels if lab not in pred.labels] + sorted(r_types - p_types)
    extra = [lab for lab in pred.labels if lab not in ref.labels] + sorted(p_types - r_types)
    if missing or extra:
        facts.append(Fact(Category.REF_PATTERN, "the reference pattern uses " + (_names(missing) or "nothing more")
                          + ", the prediction " + (_names(extra) if extra else "nothing else") + " instead"))
    if pred.distinct != ref.distinct:
        facts.append(Fact(Category.REF_DISTINCT, "the reference returns DISTINCT rows, the prediction does not"
                          if ref.distinct else "the prediction returns DISTINCT rows, the reference does not"))
    return facts

