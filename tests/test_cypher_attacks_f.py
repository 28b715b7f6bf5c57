"""Issue 12, class F (and G for Cypher): the embedded FalkorDB executor under queries that hang or
crash the engine, concurrent load across a restart, a procedure name glued to CALL, and text that
cannot be sent at all. Real engine, real restarts."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dspy_hero.execution import cypher_common
from dspy_hero.execution.base import REJECTED, RESOURCE, SYNTAX
from dspy_hero.execution.cypher import FalkorDBExecutor
from dspy_hero.execution.cypher_graphs import MAX_NESTING, complexity_violation, read_only_violation

GRAPH = {
    "nodes": [{"id": i, "labels": ["P"], "properties": {"n": i}} for i in range(30)],
    "edges": [{"source": i, "target": (i + 1) % 30, "type": "NEXT"} for i in range(30)],
}
KILLER = "RETURN " + "[" * 50000 + "1" + "]" * 50000  # the issue's: overflows the parser's stack
CORRECT = [
    ("MATCH (p:P) RETURN count(p)", ((30,),)),
    ("MATCH (a:P)-[:NEXT]->(b:P) WHERE a.n < 3 RETURN a.n, b.n ORDER BY a.n", ((0, 1), (1, 2), (2, 3))),
    ("MATCH (p:P {n: 7}) RETURN p.n * 2", ((14,),)),
]


@pytest.fixture()
def engine():
    ex = FalkorDBExecutor(timeout_s=5.0)
    ex.load_graph("g", GRAPH)
    try:
        yield ex
    finally:
        ex.close()


@pytest.fixture()
def guard_off(monkeypatch):
    """Lets pathological text reach the engine, to exercise what happens when a query kills it
    (the static guard below stops every query we know of that does)."""
    monkeypatch.setattr(cypher_common, "complexity_violation", lambda text: None)


PATHOLOGICAL = [
    ("issue's 50,000-deep list", KILLER),
    ("list 25 deep", "RETURN " + "[" * 25 + "1" + "]" * 25),
    ("parens 20 deep", "RETURN " + "(" * 20 + "1" + ")" * 20),
    ("unary minus x20", "RETURN " + "-" * 20 + "1"),
    ("NOT x20", "RETURN " + "NOT " * 20 + "true"),
    ("nested calls", "RETURN " + "size(" * 20 + "[1]" + ")" * 20),
    ("maps 20 deep", "RETURN " + "{a: " * 20 + "1" + "}" * 20),
    ("mixed unary and parens", "RETURN " + "-(" * 10 + "1" + ")" * 10),
    ("deep but under the length cap", "RETURN " + "[" * 40000 + "1" + "]" * 40000),
    ("many moderately deep terms", "RETURN " + ", ".join(["[" * 11 + "1" + "]" * 11] * 40)),
    ("huge text", "RETURN '" + "x" * 200_000 + "'"),
]


@pytest.mark.parametrize("name,cypher", PATHOLOGICAL, ids=[p[0] for p in PATHOLOGICAL])
def test_pathological_nesting_is_refused_before_the_engine(engine, name, cypher):
    pid = engine.pid
    t0 = time.monotonic()
    r = engine.run(cypher, "g")
    assert not r.ok and r.error_type == RESOURCE and "refused before execution" in r.error_message, r
    assert time.monotonic() - t0 < 1.0  # unguarded: a 4-10 s hang and a restart, or a crash
    assert engine.pid == pid and engine.alive()


def test_ordinary_nesting_still_runs(engine):
    ok = "RETURN " + "[" * MAX_NESTING + "1" + "]" * MAX_NESTING
    assert complexity_violation(ok) is None
    assert engine.run(ok, "g").ok
    r = engine.run("MATCH (p:P) WHERE NOT (p.n IN [-1, -2]) AND -p.n < 0 RETURN count(p)", "g")
    assert r.ok and r.rows == ((29,),)


def test_cypherbench_gold_passes_the_nesting_guard():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "cypherbench" / "cypherbench_test_subset_192.json"
    if not path.is_file():
        pytest.skip("CypherBench subset not present")
    refused = [r["gold_cypher"] for r in json.loads(path.read_text()) if complexity_violation(r["gold_cypher"])]
    assert refused == []


def test_a_query_that_crashes_the_server_is_never_sent_again(engine, guard_off):
    pid = engine.pid
    r = engine.run(KILLER, "g")
    assert not r.ok and r.error_type == RESOURCE and r.details.get("crashed_engine"), r
    assert "crashed" in r.error_message and "not sent again" in r.error_message
    assert engine.pid != pid and engine.alive()
    restarted_pid = engine.pid
    again = engine.run(KILLER + " ", "g")  # the same query (whitespace stripped): refused, not re-sent
    assert not again.ok and again.error_type == RESOURCE and again.details.get("crashed_engine")
    assert engine.pid == restarted_pid, "the killer was sent again and crashed the new server"
    assert engine.run(*CORRECT[0][:1], "g").rows == CORRECT[0][1]


def test_concurrent_queries_survive_a_crash_transparently(engine, guard_off):
    """The issue saw 169 of 22,329 concurrent correct queries fail across one restart. Here every
    correct query must return its rows; the killer is named as the cause, crashing the server at most
    twice (once among others, once when retried alone), and is then refused."""
    pid = engine.pid
    stop = threading.Event()
    outcomes: list[tuple[bool, str]] = []

    def worker(i: int) -> None:
        k = 0
        while not stop.is_set():
            query, expected = CORRECT[(i + k) % len(CORRECT)]
            r = engine.run(query, "g")
            outcomes.append((r.ok and r.rows == expected, r.describe()))
            k += 1

    with ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(worker, i) for i in range(6)]
        time.sleep(0.3)
        r = engine.run(KILLER, "g")
        time.sleep(0.5)
        again = engine.run(KILLER, "g")
        time.sleep(0.3)
        stop.set()
        for f in futures:
            f.result()
    assert not r.ok and r.details.get("crashed_engine"), r
    assert not again.ok and again.details.get("crashed_engine") and "earlier" in again.error_message
    failures = [d for ok, d in outcomes if not ok]
    assert len(outcomes) > 50 and failures == [], failures[:5]
    assert engine.pid != pid and engine.alive()


def _hammer(executor, workers: int, during) -> list[tuple[bool, str]]:
    """Run the correct queries from `workers` threads while `during()` runs; their outcomes."""
    stop = threading.Event()
    outcomes: list[tuple[bool, str]] = []

    def worker(i: int) -> None:
        k = 0
        while not stop.is_set():
            query, expected = CORRECT[(i + k) % len(CORRECT)]
            r = executor.run(query, "g")
            outcomes.append((r.ok and r.rows == expected, r.describe()))
            k += 1

    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(worker, i) for i in range(workers)]
        try:
            during()
        finally:
            stop.set()
            for f in futures:
                f.result()
    return outcomes


def test_queries_cut_by_another_querys_timeout_restart_are_retried():
    """A runaway that ignores the engine timeout forces a restart; queries in flight then lose their
    connection and must be retried on the new server (which has the graph loaded before any query
    reaches it), not scored 0."""
    runaway = "RETURN size(reduce(s = '', x IN range(1, 5000000) | s + 'xxxxxxxxxx'))"
    fast = FalkorDBExecutor(timeout_s=1.0, threads=4)
    fast.load_graph("g", GRAPH)
    try:
        pid = fast.pid
        box = {}

        def runaway_then_settle() -> None:
            box["slow"] = fast.run(runaway, "g")
            time.sleep(0.3)

        outcomes = _hammer(fast, 4, runaway_then_settle)
        assert box["slow"].error_type == "Timeout" and fast.pid != pid
        failures = [d for ok, d in outcomes if not ok]
        assert len(outcomes) > 50 and failures == [], failures[:5]
    finally:
        fast.close()


@pytest.mark.parametrize(
    "cypher",
    [
        "CALL`db.idx.fulltext.createNodeIndex`('P', 'n')",
        "CALL`db.idx.fulltext.drop`('P')",
        "CALL db.idx.fulltext.createNodeIndex('P', 'n')",
        "CALL\tdb.idx.fulltext.createNodeIndex('P', 'n')",
        "CALL/* */db.idx.fulltext.createNodeIndex('P', 'n')",
        "MATCH (n) CALL`apoc.create.node`(['X'], {}) YIELD node RETURN node",
    ],
)
def test_call_without_space_is_checked_by_the_allow_list(engine, cypher):
    assert read_only_violation(cypher) is not None
    r = engine.run(cypher, "g")
    assert not r.ok and r.error_type == REJECTED and "refused before execution" in r.error_message, r


def test_allowed_procedures_and_subqueries_still_run(engine):
    assert engine.run("CALL db.labels()", "g").rows == (("P",),)
    assert engine.run("CALL{ MATCH (p:P) RETURN p.n AS n } RETURN count(n)", "g").rows == ((30,),)


@pytest.mark.parametrize(
    "program",
    ["RETURN '\ud800'", "RETURN 1 // \udfff", "\udc80", "RETURN '\x00'", b"RETURN 1", 12, None, "RETURN '" + "\U0010ffff" * 10 + "'"],
)
def test_run_never_raises(engine, program):
    r = engine.run(program, "g")
    assert r.ok or (r.error_type and r.error_message), r
    if isinstance(program, str) and "\ud800" in program:
        assert r.error_type == SYNTAX and "Unicode" in r.error_message


def test_run_never_raises_on_bad_graph_names(engine):
    for graph in (None, 3, "\ud800", "missing"):
        r = engine.run("RETURN 1", graph)
        assert not r.ok and r.error_type == "EnvironmentError"
