"""Neo4jExecutor: a clear error for an unreachable server (always runs, against a closed local port),
and real queries against a configured server (skipped unless HERO_NEO4J_URI is set)."""

from __future__ import annotations

import os
import socket
import time

import dspy
import pytest

from dspy_hero.execution.base import EMPTY_PROGRAM, REJECTED, SYNTAX
from dspy_hero.execution.cypher import Neo4jExecutor
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


def test_from_env_needs_a_uri(monkeypatch):
    monkeypatch.delenv("HERO_NEO4J_URI", raising=False)
    with pytest.raises(ValueError, match="HERO_NEO4J_URI"):
        Neo4jExecutor.from_env()


def test_invalid_uri_scheme_is_clear():
    with pytest.raises(ValueError, match="invalid Neo4j URI"):
        Neo4jExecutor("ftp://127.0.0.1:1")


needs_server = pytest.mark.skipif(not os.environ.get("HERO_NEO4J_URI"), reason="HERO_NEO4J_URI is not set")


@pytest.fixture(scope="module")
def neo4j_engine():
    with Neo4jExecutor.from_env(timeout_s=10.0, max_rows=100) as ex:
        yield ex


@pytest.mark.neo4j
@needs_server
def test_read_queries_and_normalization(neo4j_engine):
    r = neo4j_engine.run("RETURN [3, 1, 2] AS xs, date('2020-01-02') AS d, {b: 1, a: 2} AS m")
    assert r.ok and r.rows == (((1, 2, 3), "2020-01-02", (("a", 2), ("b", 1))),)
    assert neo4j_engine.run("UNWIND range(1, 1000) AS x RETURN x").truncated
    assert neo4j_engine.run("").error_type == EMPTY_PROGRAM
    assert neo4j_engine.run("MATCH (n RETURN n").error_type == SYNTAX


@pytest.mark.neo4j
@needs_server
def test_writes_are_refused_and_nothing_is_committed(neo4j_engine):
    before = neo4j_engine.run("MATCH (n) RETURN count(n)").rows
    for query in ("CREATE (:HeroEvil)", "MERGE (:HeroEvil {x: 1})", "MATCH (n) SET n.hero_evil = 1"):
        r = neo4j_engine.run(query)
        assert not r.ok and r.error_type in {REJECTED, "RuntimeError"}, r
    assert neo4j_engine.run("LOAD CSV FROM 'file:///etc/passwd' AS r RETURN r").error_type == REJECTED
    assert neo4j_engine.run("MATCH (n) RETURN count(n)").rows == before


@pytest.mark.neo4j
@needs_server
def test_metric_on_neo4j(neo4j_engine):
    metric = cypher_execution_metric(engine=neo4j_engine)
    ex = dspy.Example(question="q", graph="neo4j", gold_cypher="UNWIND [1, 2, 3] AS x RETURN x").with_inputs("question")
    assert metric(ex, dspy.Prediction(cypher="UNWIND [3, 2, 1] AS y RETURN y")).score == 1.0
    assert metric(ex, dspy.Prediction(cypher="UNWIND [1, 2] AS y RETURN y")).score == 0.0
