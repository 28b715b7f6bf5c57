"""Evidence for Python and Cypher cases: build_cases diagnoses each failing case in its own
environment (the real sandbox, the real embedded FalkorDB), and a shared task context is shown once."""

from __future__ import annotations

import dspy
import pytest

from dspy_hero.diagnosis import Category, Diagnoser
from dspy_hero.optimizer.evidence import Case, DefaultEvidenceRenderer, build_cases
from dspy_hero.optimizer.rollout import RolloutResult

PROMPT = '''def task_func(values):
    """Sum of squares.

    >>> task_func([1, 2])
    5
    """
'''


def rollout(ex_id: str, score: float, outputs: dict, feedback: str = "fb") -> RolloutResult:
    return RolloutResult(ex_id, score, feedback, outputs=outputs, traces={})


def test_python_cases_are_diagnosed_in_the_sandbox_and_labels_stay_unread():
    ex = dspy.Example(prompt=PROMPT, entry_point="task_func", test_code="assert task_func([3]) == 9").with_inputs(
        "prompt", "entry_point")
    results = [rollout("bad", 0.0, {"code": "def task_func(values):\n    return sum(values)\n"}, "failed: 1 test failed"),
               rollout("good", 1.0, {"code": "def task_func(values):\n    return sum(v * v for v in values)\n"})]
    cases = build_cases(results, {"bad": ex, "good": ex}, "generate", pass_threshold=1.0, num_failing=4, num_passing=4)
    failing, passing = cases
    assert failing.language == "python" and passing.diagnosis is None
    assert failing.diagnosis.primary is Category.EXAMPLE_OUTPUT_DIFFERS
    text, _ = DefaultEvidenceRenderer(token_budget=4000).render(cases)
    assert "Diagnosis: visible example 1 (`task_func([1, 2])`) prints `3`; the prompt shows `5`" in text
    assert "assert task_func([3]) == 9" not in text  # the hidden test is a label


def test_a_shared_task_context_is_shown_once():
    library = "You may use these helpers: " + " ".join(f"helper_{i}(x)" for i in range(40))
    cases = [Case(f"F{i}", f"f{i}", False, 0.0, {"library": library, "prompt": f"task {i}"}, {"code": "pass"}, "fb")
             for i in range(1, 4)]
    text, shown = DefaultEvidenceRenderer(token_budget=4000).render(cases)
    assert shown == ["F1", "F2", "F3"] and text.count(library) == 1
    assert "## Context A, shared by case(s) F1, F2, F3" in text and text.count("prompt: task") == 3


cypher = pytest.importorskip("dspy_hero.execution.falkordb_executor", reason="the embedded Cypher engine is not installed")


def test_cypher_cases_are_diagnosed_against_the_graph(tmp_path):
    script = tmp_path / "films.cypher"
    script.write_text("CREATE (a:Person {name: 'Ann'}), (m:Movie {title: 'X'}), (a)-[:ACTED_IN]->(m);", encoding="utf-8")
    ex = dspy.Example(question="Who acted in X?", graph_schema="(:Person)-[:ACTED_IN]->(:Movie)", graph="films",
                      graph_source=str(script), gold_cypher="MATCH (p:Person)-[:ACTED_IN]->(:Movie) RETURN p.name"
                      ).with_inputs("question", "graph_schema", "graph", "graph_source")
    results = [rollout("e1", 0.0, {"cypher": "MATCH (p:Person)-[:ACTS_IN]->(m:Movie) RETURN p.name"}),
               rollout("e2", 0.0, {"cypher": "MATCH (m:Movie)-[:ACTED_IN]->(p:Person) RETURN p.name"})]
    engine = cypher.FalkorDBExecutor(timeout_s=20.0)
    try:
        with Diagnoser(engine=engine) as diagnoser:
            cases = build_cases(results, {"e1": ex, "e2": ex}, "generate", pass_threshold=1.0, num_failing=4,
                                num_passing=4, diagnose=diagnoser, training_references=True)
    finally:
        engine.close()
    assert [c.diagnosis.primary for c in cases] == [Category.UNKNOWN_RELATIONSHIP, Category.WRONG_DIRECTION]
    assert cases[0].reference == ex.gold_cypher
    assert any(f.category is Category.REF_PATTERN for f in cases[0].diagnosis.facts)
    text, _ = DefaultEvidenceRenderer(token_budget=4000).render(cases)
    assert "similar types: `ACTED_IN`" in text and "graph_source" not in text and str(script) not in text
    assert "REF" not in text and "reference pattern" not in text  # not shown unless the renderer is asked too
