"""cypher_execution_metric on the real embedded FalkorDB engine: CypherBench semantics (self-equality,
perturbation, column permutation, ORDER BY sensitivity, lists sorted in cells), DSPy/GEPA calling
conventions, label-safe feedback, engine ownership and gold caching."""

from __future__ import annotations

import json
import os
import threading
import time

import dspy
import pytest

from dspy_hero.execution.falkordb_executor import FalkorDBExecutor
from dspy_hero.metrics.cypher import cypher_execution_metric
from dspy_hero.metrics.infer import infer_metric

GRAPH = {
    "nodes": [
        {"id": 1, "labels": ["Person"], "properties": {"name": "Ann", "born": 1970}},
        {"id": 2, "labels": ["Person"], "properties": {"name": "Bob", "born": 1980}},
        {"id": 3, "labels": ["Person"], "properties": {"name": "Cid", "born": 1990}},
        {"id": 10, "labels": ["Movie"], "properties": {"title": "Orbit", "year": 2001}},
        {"id": 11, "labels": ["Movie"], "properties": {"title": "Tide", "year": 2011}},
    ],
    "edges": [
        {"source": 1, "target": 10, "type": "ACTED_IN"},
        {"source": 2, "target": 10, "type": "ACTED_IN"},
        {"source": 2, "target": 11, "type": "ACTED_IN"},
        {"source": 3, "target": 11, "type": "DIRECTED"},
    ],
}


@pytest.fixture(scope="module")
def engine():
    with FalkorDBExecutor(timeout_s=5.0, max_rows=1000) as ex:
        ex.load_graph("films", GRAPH)
        yield ex


@pytest.fixture(scope="module")
def metric(engine):
    return cypher_execution_metric(engine=engine)


def example(gold: str, graph: str = "films", **extra) -> dspy.Example:
    return dspy.Example(question="q", graph_schema="", graph=graph, gold_cypher=gold, **extra).with_inputs(
        "question", "graph_schema", "graph"
    )


def score(metric, gold: str, pred: str, **extra) -> dspy.Prediction:
    return metric(example(gold, **extra), dspy.Prediction(cypher=pred))


ACTORS = "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN p.name, m.title"


def test_self_equality_and_calling_conventions(metric):
    ex, pred = example(ACTORS), dspy.Prediction(cypher=f"```cypher\n{ACTORS}\n```")
    for result in (metric(ex, pred), metric(ex, pred, None), metric(ex, pred, None, "generate", None)):
        assert isinstance(result, dspy.Prediction) and result.score == 1.0 and "Correct" in result.feedback
    # a differently written but equivalent query runs (no text shortcut) and still matches
    alt = "MATCH (m:Movie)<-[:ACTED_IN]-(p:Person) RETURN p.name AS who, m.title AS what"
    assert score(metric, ACTORS, alt).score == 1.0


def test_perturbed_queries_score_zero_with_the_differing_property(metric):
    r = score(metric, ACTORS, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) WHERE m.year > 2005 RETURN p.name, m.title")
    assert r.score == 0.0 and "different number of rows" in r.feedback
    r = score(metric, ACTORS, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN p.name")
    assert r.score == 0.0 and "different number of columns" in r.feedback
    r = score(metric, ACTORS, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN p.born, m.title")
    assert r.score == 0.0 and "different values" in r.feedback


def test_column_permutation_is_allowed(metric):
    assert score(metric, ACTORS, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN m.title, p.name").score == 1.0


def test_row_order_matters_only_when_gold_orders(metric):
    gold = "MATCH (p:Person) RETURN p.name ORDER BY p.born DESC"
    r = score(metric, gold, "MATCH (p:Person) RETURN p.name ORDER BY p.born")
    assert r.score == 0.0 and "order" in r.feedback
    assert score(metric, gold, "MATCH (p:Person) RETURN p.name ORDER BY p.name DESC").score == 1.0
    unordered_gold = "MATCH (p:Person) RETURN p.name"
    assert score(metric, unordered_gold, "MATCH (p:Person) RETURN p.name ORDER BY p.born DESC").score == 1.0


def test_multiset_and_lists_inside_cells(metric):
    gold = "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN m.title"  # Orbit twice: a multiset
    assert score(metric, gold, "MATCH (p:Person)-[:ACTED_IN]->(m:Movie) RETURN DISTINCT m.title").score == 0.0
    gold = "MATCH (p:Person)-[:ACTED_IN]->(:Movie {title: 'Orbit'}) WITH p ORDER BY p.name RETURN collect(p.name)"
    pred = "MATCH (p:Person)-[:ACTED_IN]->(:Movie {title: 'Orbit'}) WITH p ORDER BY p.name DESC RETURN collect(p.name)"
    assert score(metric, gold, pred).score == 1.0  # lists are sorted inside cells, as CypherBench does


def test_empty_results(metric):
    none = "MATCH (p:Person {name: 'Zed'}) RETURN p.name"
    assert score(metric, none, "MATCH (m:Movie {title: 'Nope'}) RETURN m.title, m.year").score == 1.0
    assert score(metric, ACTORS, none).score == 0.0


def test_failures_name_the_error_and_never_the_gold(metric):
    r = score(metric, ACTORS, "MATCH (p:Person RETURN p")
    assert r.score == 0.0 and "SyntaxError" in r.feedback and "FalkorDB" in r.feedback
    r = score(metric, ACTORS, "CREATE (:Evil)")
    assert r.score == 0.0 and "Rejected" in r.feedback
    r = score(metric, ACTORS, "")
    assert r.score == 0.0 and "EmptyProgram" in r.feedback
    r = score(metric, ACTORS, "MATCH (p:Person) RETURN p.name, p.born")
    assert r.score == 0.0
    assert "Orbit" not in r.feedback and "Tide" not in r.feedback and "ACTED_IN" not in r.feedback


def test_reveal_expected_shows_gold(engine):
    m = cypher_execution_metric(engine=engine, reveal_expected=True)
    r = m(example(ACTORS), dspy.Prediction(cypher="MATCH (p:Person) RETURN p.name, p.born"))
    assert r.score == 0.0 and "Gold Cypher: " + ACTORS in r.feedback and "Orbit" in r.feedback


def test_gold_failure_and_missing_things(metric, caplog, tmp_path):
    r = score(metric, "MATCH (n RETURN n", ACTORS)
    assert r.score == 0.0 and "gold query failed" in r.feedback
    r = score(metric, ACTORS, ACTORS, graph="not_loaded")
    assert r.score == 0.0 and "EnvironmentError" in r.feedback
    with pytest.raises(FileNotFoundError):
        metric(example(ACTORS, graph="x", graph_source=str(tmp_path / "missing.json")), dspy.Prediction(cypher=ACTORS))
    with pytest.raises(KeyError, match="gold_cypher"):
        metric(dspy.Example(question="q", graph="films"), dspy.Prediction(cypher=ACTORS))


def test_gold_is_cached(engine):
    m = cypher_execution_metric(engine=engine)
    for pred in (ACTORS, "MATCH (p:Person) RETURN p.name", "RETURN 1"):
        m(example(ACTORS), dspy.Prediction(cypher=pred))
    assert len(m.judge._cache) == 1


def test_engine_mapping(engine):
    m = cypher_execution_metric(engine={"films": engine})
    assert m(example(ACTORS), dspy.Prediction(cypher=ACTORS)).score == 1.0
    r = m(example(ACTORS, graph="other"), dspy.Prediction(cypher=ACTORS))
    assert r.score == 0.0 and "no engine for graph" in r.feedback


def test_default_engine_is_embedded_loads_sources_once_and_closes(tmp_path, monkeypatch):
    monkeypatch.delenv("HERO_NEO4J_URI", raising=False)
    path = tmp_path / "films.json"
    path.write_text(json.dumps(GRAPH))
    examples = [example(ACTORS, graph_source=str(path)), example("MATCH (m:Movie) RETURN m.title", graph_source=str(path))]
    m = infer_metric(examples)
    assert m.language == "cypher"
    preds = [dspy.Prediction(cypher=ACTORS), dspy.Prediction(cypher="MATCH (m:Movie) RETURN m.year")]
    results = []
    threads = [threading.Thread(target=lambda e=e, p=p: results.append(m(e, p).score)) for e, p in zip(examples * 3, preds * 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [0.0] * 3 + [1.0] * 3
    server = m.judge._engine
    assert server.graph_names() == ["films"]
    pid = server.pid
    m.close()
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the metric's embedded server survived metric.close()")


class _Fixed(dspy.Module):
    """A program that answers from a table: no LM needed to exercise dspy.Evaluate's threads."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers

    def forward(self, question, graph_schema="", graph=""):
        return dspy.Prediction(cypher=self.answers[question])


def test_works_with_dspy_evaluate_threads(metric):
    golds = [ACTORS, "MATCH (m:Movie) RETURN m.title", "MATCH (p:Person) RETURN count(p)"]
    preds = [ACTORS, "MATCH (m:Movie) RETURN m.year", "MATCH (p:Person) RETURN count(*)"]
    devset = [
        dspy.Example(question=f"q{i}", graph_schema="", graph="films", gold_cypher=g).with_inputs("question", "graph_schema", "graph")
        for i, g in enumerate(golds)
    ] * 4
    program = _Fixed({f"q{i}": p for i, p in enumerate(preds)})
    result = dspy.Evaluate(devset=devset, metric=metric, num_threads=4, display_progress=False)(program)
    assert round(result.score, 2) == round(100 * 2 / 3, 2)
