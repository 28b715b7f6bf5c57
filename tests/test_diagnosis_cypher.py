"""Cypher diagnosis facts, on a graph loaded into the real embedded FalkorDB engine."""

from __future__ import annotations

import pytest

cypher = pytest.importorskip("dspy_hero.execution.falkordb_executor", reason="the embedded Cypher engine is not installed")

from dspy_hero.diagnosis import Category, Diagnoser, diagnose
from dspy_hero.diagnosis.cypher import parse_graph_schema, query_patterns

SCRIPT = """
CREATE (a:Person {name: 'Ann', born: 1970}), (b:Person {name: 'Bob', born: 1980}), (c:Person {name: 'Cid', born: 1990}),
       (m:Movie {title: 'Deep Orbit', released: 2001}), (n:Movie {title: 'Paper Dragons', released: 2010}),
       (a)-[:ACTED_IN {role: 'pilot'}]->(m), (b)-[:ACTED_IN]->(m), (c)-[:ACTED_IN]->(n), (b)-[:DIRECTED]->(n);
"""


@pytest.fixture(scope="module")
def engine():
    executor = cypher.FalkorDBExecutor(timeout_s=20.0)
    yield executor
    executor.close()


@pytest.fixture(scope="module")
def refs(engine, tmp_path_factory):
    path = tmp_path_factory.mktemp("graph") / "films.cypher"
    path.write_text(SCRIPT, encoding="utf-8")
    return {"graph": "films", "graph_source": str(path), "engine": engine}


@pytest.fixture(scope="module")
def diagnoser(engine):
    with Diagnoser(engine=engine) as dg:
        yield dg


def facts(diagnoser, refs, query, **kw):
    d = diagnoser.diagnose("cypher", refs, query, **kw)
    first: dict = {}
    for fact in d.facts:
        first.setdefault(fact.category, fact.text)
    return d, first


def test_a_correct_query_gets_no_fact(diagnoser, refs):
    d, f = facts(diagnoser, refs, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie {title: 'Deep Orbit'}) RETURN p.name")
    assert f == {} and d.structure == "labels `Person`, `Movie`; relationships `ACTED_IN`; reads `m.title`, `p.name`"


def test_unknown_relationship_type_label_and_property_say_what_the_graph_has(diagnoser, refs):
    d, f = facts(diagnoser, refs, "MATCH (p:Person)-[:ACTS_IN]->(m:Movie) RETURN p.name")
    assert d.primary is Category.UNKNOWN_RELATIONSHIP
    assert f[Category.UNKNOWN_RELATIONSHIP] == "relationship type `ACTS_IN` is not in the graph; similar types: `ACTED_IN`"
    assert f[Category.EMPTY_RESULT] == "the query returned no rows"
    _, f = facts(diagnoser, refs, "MATCH (p:Actor) RETURN p.name")
    assert f[Category.UNKNOWN_LABEL] == "label `Actor` is not in the graph; labels: `Movie`, `Person`"
    _, f = facts(diagnoser, refs, "MATCH (p:Person) RETURN p.title")
    assert f[Category.UNKNOWN_PROPERTY] == "`Person` has no property `title` (read as `p.title`); labels that have it: `Movie`"
    assert f[Category.NULL_COLUMN] == "column(s) `p.title` are NULL in all 3 returned row(s)"
    _, f = facts(diagnoser, refs, "MATCH (:Person)-[r:ACTED_IN]->(:Movie) RETURN r.year")
    assert f[Category.UNKNOWN_PROPERTY] == ("relationship `ACTED_IN` has no property `year` (read as `r.year`); "
                                            "its properties: `role`")


def test_direction_and_endpoints_of_a_relationship(diagnoser, refs):
    _, f = facts(diagnoser, refs, "MATCH (m:Movie)-[:ACTED_IN]->(p:Person) RETURN p.name")
    assert f[Category.WRONG_DIRECTION] == ("the query follows (:Movie)-[:ACTED_IN]->(:Person), but the graph has "
                                           "(:Person)-[:ACTED_IN]->(:Movie) (reversed)")
    _, f = facts(diagnoser, refs, "MATCH (p:Person)<-[:ACTED_IN]-(m:Movie) RETURN p.name")
    assert Category.WRONG_DIRECTION in f
    _, f = facts(diagnoser, refs, "MATCH (p:Person)-[:ACTED_IN]->(q:Person) RETURN p.name")
    assert f[Category.WRONG_ENDPOINTS].startswith("the query uses (:Person)-[:ACTED_IN]->(:Person), but `ACTED_IN` only connects")
    _, f = facts(diagnoser, refs, "MATCH (m:Movie)-[:ACTED_IN]-(p:Person) RETURN p.name")  # undirected: fine
    assert f == {}


def test_syntax_error_position(diagnoser, refs):
    d, f = facts(diagnoser, refs, "MATCH (p:Person RETURN p")
    assert d.primary is Category.SYNTAX_ERROR and f[Category.SYNTAX_ERROR].endswith("(line 1, column 17)")


def test_string_literals_are_not_read_as_patterns():
    p = query_patterns("MATCH (m:Movie) WHERE m.title = '(x:Fake)-[:NOPE]->()' RETURN m.title")
    assert p.labels == ["Movie"] and p.hops == [] and ("m", "title") in p.reads


def test_reference_pattern_only_when_passed(diagnoser, refs):
    pred = "MATCH (p:Person)-[:DIRECTED]->(m:Movie) RETURN p.name"
    ref = "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN DISTINCT p.name"
    _d, f = facts(diagnoser, refs, pred)
    assert not any(c.from_reference for c in f)
    _, f = facts(diagnoser, refs, pred, reference=ref)
    assert f[Category.REF_PATTERN] == "the reference pattern uses `ACTED_IN`, the prediction `DIRECTED` instead"
    assert Category.REF_DISTINCT in f


def test_schema_text_parsing():
    schema = parse_graph_schema("Node labels and properties:\n  (:Movie {released: INTEGER, title: STRING})\n"
                                "Relationship types:\n  (:Person)-[:ACTED_IN {role: STRING}]->(:Movie)\n")
    assert schema.labels == {"Movie": {"released", "title"}}
    assert schema.relationships == {"ACTED_IN": {("Person", "Movie")}} and schema.relationship_props["ACTED_IN"] == {"role"}


def test_one_diagnoser_serves_sql_and_cypher_cases(diagnoser, refs, tmp_path):
    import sqlite3

    db = tmp_path / "t.sqlite"
    sqlite3.connect(db).executescript("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1);")
    d = diagnoser.diagnose(None, {"db_path": str(db)}, "SELECT b FROM t")  # the engine= option is Cypher's only
    assert d.language == "sql" and d.primary is Category.UNKNOWN_COLUMN and not d.errors


def test_one_call_diagnose_builds_and_closes_its_environment(refs):
    d = diagnose("cypher", refs, "MATCH (p:Persn) RETURN p")
    assert d.primary is Category.UNKNOWN_LABEL and "similar labels: `Person`" in d.facts[0].text
