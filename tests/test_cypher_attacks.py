"""Hostile Cypher through the embedded FalkorDB executor (issue 7): writes by clause, procedures that
write (or read files), several statements, file and URL reads, and runaways (variable-length paths,
cartesian products, memory bombs, huge results, an expression the engine timeout cannot interrupt).
Every attack must be stopped with a clear Execution error (or cut at the row cap) and leave the graph
exactly as it was: a full dump of nodes, edges, labels, property keys and indexes is compared."""

from __future__ import annotations

import logging
import time

import pytest

from dspy_hero.execution.base import REJECTED, RESOURCE, SYNTAX, TIMEOUT
from dspy_hero.execution.falkordb_executor import FalkorDBExecutor

logger = logging.getLogger(__name__)

CAP = 500
GRAPH = {
    "nodes": [{"id": i, "labels": ["Person"], "properties": {"name": f"p{i}", "age": 20 + i}} for i in range(12)]
    + [{"id": "city", "labels": ["City"], "properties": {"name": "Paris"}}],
    "edges": [{"source": i, "target": j, "type": "KNOWS", "properties": {"w": i * j}} for i in range(12) for j in range(12) if i != j]
    + [{"source": 0, "target": "city", "type": "LIVES_IN"}],
}

W = {REJECTED}
# (name, category, cypher, accepted error types)
ATTACKS = [
    ("create node", "CREATE", "CREATE (:Evil {x: 1})", W),
    ("create lowercase", "CREATE", "create (:Evil)", W),
    ("create after match", "CREATE", "MATCH (a:Person {name: 'p0'}) CREATE (a)-[:OWNS]->(:Evil)", W),
    ("create returning", "CREATE", "CREATE (e:Evil) RETURN e", W),
    ("create in subquery", "CREATE", "CALL { CREATE (e:Evil) RETURN e } RETURN e", W),
    ("create via unwind", "CREATE", "UNWIND range(1, 10) AS i CREATE (:Evil {i: i})", W),
    ("create via foreach", "CREATE", "MATCH (p:Person) FOREACH (x IN [1] | CREATE (:Evil))", W),
    ("create hidden after comment", "CREATE", "/* read only */ MATCH (n) WITH n LIMIT 1 CREATE (:Evil)", W),
    ("merge node", "MERGE", "MERGE (:Evil {x: 1})", W),
    ("merge on match set", "MERGE", "MERGE (p:Person {name: 'p0'}) ON MATCH SET p.age = 0", W),
    ("merge edge", "MERGE", "MATCH (a:Person), (c:City) MERGE (a)-[:LIVES_IN]->(c)", W),
    ("delete edge", "DELETE", "MATCH ()-[r:KNOWS]->() DELETE r", W),
    ("detach delete all", "DELETE", "MATCH (n) DETACH DELETE n", W),
    ("delete optional", "DELETE", "OPTIONAL MATCH (c:City) DETACH DELETE c", W),
    ("set property", "SET", "MATCH (p:Person) SET p.age = 0", W),
    ("set map", "SET", "MATCH (p:Person) SET p += {evil: true}", W),
    ("set replace map", "SET", "MATCH (p:Person) SET p = {}", W),
    ("set label", "SET", "MATCH (p:Person) SET p:Evil", W),
    ("set edge property", "SET", "MATCH ()-[r:KNOWS]->() SET r.w = -1", W),
    ("remove property", "REMOVE", "MATCH (p:Person) REMOVE p.age", W),
    ("remove label", "REMOVE", "MATCH (p:Person) REMOVE p:Person", W),
    ("create index", "INDEX", "CREATE INDEX FOR (p:Person) ON (p.name)", W),
    ("create index old syntax", "INDEX", "CREATE INDEX ON :Person(age)", W),
    ("drop index", "INDEX", "DROP INDEX ON :Person(name)", W | {SYNTAX}),
    ("fulltext index procedure", "PROCEDURE", "CALL db.idx.fulltext.createNodeIndex('Person', 'name')", W),
    ("fulltext drop procedure", "PROCEDURE", "CALL db.idx.fulltext.drop('Person')", W),
    ("procedure with yield", "PROCEDURE", "CALL db.idx.fulltext.createNodeIndex('City', 'name') YIELD x RETURN x", W),
    ("backticked procedure", "PROCEDURE", "CALL `db.idx.fulltext.createNodeIndex`('Person', 'name')", W),
    ("apoc create", "PROCEDURE", "CALL apoc.create.node(['Evil'], {})", W),
    ("apoc load json", "PROCEDURE", "CALL apoc.load.json('file:///etc/passwd') YIELD value RETURN value", W),
    ("config change", "PROCEDURE", "CALL dbms.setConfigValue('TIMEOUT_MAX', '0')", W),
    ("load csv file", "FILE", "LOAD CSV FROM 'file:///etc/passwd' AS row RETURN row", W),
    ("load csv url", "FILE", "LOAD CSV WITH HEADERS FROM 'https://example.com/a.csv' AS row RETURN row", W),
    ("two statements", "MULTI", "MATCH (n) RETURN count(n); MATCH (n) DETACH DELETE n", W),
    ("statement after comment", "MULTI", "RETURN 1; // harmless\nCREATE (:Evil)", W),
    ("variable-length path", "RUNAWAY", "MATCH p=(a)-[*]-(b) RETURN count(p)", {TIMEOUT}),
    ("long directed paths", "RUNAWAY", "MATCH p=(:Person)-[:KNOWS*1..12]->(:Person) RETURN count(p)", {TIMEOUT}),
    ("cartesian product", "RUNAWAY", "MATCH (a), (b), (c), (d), (e), (f), (g), (h) RETURN count(*)", {TIMEOUT}),
    ("memory bomb", "RUNAWAY", "UNWIND range(1, 1000000000) AS x RETURN count(x)", {RESOURCE, TIMEOUT}),
    ("sorted cross product", "RUNAWAY", "MATCH (a), (b), (c), (d), (e), (f) RETURN a.name, b.name, c.name, d.name, e, f ORDER BY f.name", {RESOURCE, TIMEOUT}),
]
RESULT_SIZE_ATTACKS = [
    ("million rows", "UNWIND range(1, 1000000) AS x RETURN x"),
    ("wide cross join", "MATCH (a), (b), (c) RETURN a, b, c"),
]


def dump(ex: FalkorDBExecutor, graph: str) -> tuple:
    """Everything a write could change, read through the executor itself."""
    queries = [
        "MATCH (n) RETURN id(n), labels(n), properties(n) ORDER BY id(n)",
        "MATCH (a)-[r]->(b) RETURN id(r), id(a), type(r), properties(r), id(b) ORDER BY id(r)",
        "CALL db.labels()",
        "CALL db.relationshipTypes()",
        "CALL db.indexes() YIELD label, properties RETURN label, properties",
    ]
    out = []
    for q in queries:
        r = ex.run(q, graph)
        assert r.ok and not r.truncated, (q, r)
        out.append(r.rows)
    return tuple(out)


@pytest.fixture(scope="module")
def engine():
    with FalkorDBExecutor(timeout_s=1.0, max_rows=CAP, memory_mb=256) as ex:
        ex.load_graph("g", GRAPH)
        yield ex


@pytest.fixture(scope="module")
def tally():
    counts = {"tried": 0, "stopped": 0}
    yield counts
    logger.info("Cypher attacks: %d tried, %d stopped", counts["tried"], counts["stopped"])
    print(f"\nCypher attacks: {counts['tried']} tried, {counts['stopped']} stopped")


@pytest.fixture(scope="module")
def baseline(engine):
    before = dump(engine, "g")
    assert len(before[0]) == 13 and len(before[1]) == 133
    return before


@pytest.mark.parametrize("name,category,cypher,accepted", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_stopped_and_graph_unchanged(engine, baseline, tally, name, category, cypher, accepted):
    tally["tried"] += 1
    t0 = time.perf_counter()
    r = engine.run(cypher, "g")
    elapsed = time.perf_counter() - t0
    assert not r.ok, f"{name}: the attack ran ({r.describe()})"
    assert r.error_type in accepted, f"{name}: {r.error_type}: {r.error_message}"
    assert r.error_message, "an attack must be stopped with a message"
    assert elapsed < 8.0, f"{name}: took {elapsed:.1f} s to stop"
    assert dump(engine, "g") == baseline, f"{name}: the graph changed"
    tally["stopped"] += 1


@pytest.mark.parametrize("name,cypher", RESULT_SIZE_ATTACKS, ids=[a[0] for a in RESULT_SIZE_ATTACKS])
def test_huge_results_are_cut_at_the_row_cap(engine, baseline, tally, name, cypher):
    tally["tried"] += 1
    r = engine.run(cypher, "g")
    assert (r.ok and r.truncated and r.row_count == CAP) or r.error_type in {TIMEOUT, RESOURCE}, r.describe()
    assert dump(engine, "g") == baseline
    tally["stopped"] += 1


def test_expression_the_engine_cannot_interrupt_is_cut_by_a_restart(engine, baseline, tally):
    """One huge expression ignores FalkorDB's timeout; the client backstop cuts it, restarts the server
    and reloads the graph, so the run goes on with the same data."""
    tally["tried"] += 1
    pid = engine.pid
    t0 = time.perf_counter()
    r = engine.run("RETURN size(reduce(s = '', x IN range(1, 5000000) | s + 'xxxxxxxxxx'))", "g")
    assert not r.ok and r.error_type == TIMEOUT and "restarted" in r.error_message, r
    assert time.perf_counter() - t0 < 8.0
    assert engine.pid != pid and engine.alive()
    assert dump(engine, "g") == baseline
    tally["stopped"] += 1


def test_engine_still_serves_after_the_attacks(engine, baseline):
    r = engine.run("MATCH (p:Person {name: 'p3'})-[:KNOWS]->(q) RETURN count(q)", "g")
    assert r.ok and r.rows == ((11,),)
    assert engine.alive()


def test_engine_read_only_mode_alone_refuses_write_procedures(engine, baseline):
    """Defense in depth: without the lexical guard, FalkorDB's read-only mode still refuses writes."""
    import redis

    handle = engine._handle("g")  # the raw engine, bypassing read_only_violation
    for query in ("CALL db.idx.fulltext.createNodeIndex('Person', 'name')", "CREATE (:Evil)", "MATCH (n) DETACH DELETE n"):
        with pytest.raises(redis.ResponseError, match="read-only"):
            handle.ro_query(query)
    assert dump(engine, "g") == baseline
