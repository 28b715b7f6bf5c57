"""What all metrics share: code extraction from LM answers, the Verdict record, the DSPy/GEPA calling
conventions, and metric inference from the examples' fields."""

from __future__ import annotations

import sqlite3

import dspy
import pytest

from dspy_hero.metrics.base import ExecutionMetric, Verdict, extract_code, score_of
from dspy_hero.metrics.infer import infer_language, infer_metric


@pytest.mark.parametrize(
    ("answer", "language", "program"),
    [
        ("```sql\nSELECT 1\n```", "sql", "SELECT 1"),
        ("Here it is:\n```python\ndef f():\n    return 1\n```\nDone.", "python", "def f():\n    return 1"),
        ("```\nMATCH (n) RETURN n\n```", "cypher", "MATCH (n) RETURN n"),
        ("```sql\nSELECT 1\n", "sql", "SELECT 1"),  # unterminated fence
        ("SQL: SELECT name FROM t", "sql", "SELECT name FROM t"),
        ("SELECT 1 LIMIT 5;[[ ## completed ## ]]", "sql", "SELECT 1 LIMIT 5;"),  # marker left inline
        ("```text\nnotes\n```\n```sql\nSELECT 2\n```", "sql", "SELECT 2"),  # the tagged block wins
        (None, "sql", ""),
        (42, "sql", "42"),
    ],
)
def test_extract_code_is_tolerant(answer, language, program):
    assert extract_code(answer, language) == program


def test_verdict_rejects_scores_outside_unit_interval():
    with pytest.raises(ValueError):
        Verdict(1.5, "x")
    assert Verdict(1.0, "ok").to_prediction().score == 1.0


def test_execution_metric_accepts_dspy_and_gepa_call_shapes():
    metric = ExecutionMetric(lambda gold, pred: Verdict(float(pred.sql == gold.gold_sql), "fb"), "m", "sql")
    gold = dspy.Example(question="q", gold_sql="SELECT 1").with_inputs("question")
    pred = dspy.Prediction(sql="SELECT 1")
    assert score_of(metric(gold, pred)) == 1.0
    assert score_of(metric(gold, pred, None)) == 1.0
    out = metric(gold, pred, None, "generate", [])
    assert out.score == 1.0 and out.feedback == "fb"
    assert metric.prediction_field == "sql"


def test_metric_inference_follows_field_conventions(tmp_path):
    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    sql = [dspy.Example(question="q", db_path=str(db), gold_sql="SELECT a FROM t").with_inputs("question")]
    assert infer_language(sql) == "sql"
    metric = infer_metric(sql)
    assert metric.language == "sql"
    assert metric(sql[0], dspy.Prediction(sql="SELECT a FROM t")).score == 1.0
    assert metric(sql[0], dspy.Prediction(sql="SELECT a + 1 FROM t")).score == 0.0
    assert infer_language([dspy.Example(prompt="p", test_code="t").with_inputs("prompt")]) == "python-tests"
    assert infer_language([dspy.Example(question="q", graph="g", gold_cypher="c")]) == "cypher"
    with pytest.raises(ValueError, match="none of the label fields"):
        infer_language([dspy.Example(question="q", answer="a")])
    with pytest.raises(ValueError, match="mix task kinds"):
        infer_language(sql + [dspy.Example(prompt="p", test_code="t")])
    with pytest.raises(ValueError, match="empty"):
        infer_language([])


def test_failed_verdict_is_falsy_so_bootstrapping_rejects_its_trace(tmp_path):
    """DSPy's BootstrapFewShot (and MIPROv2's demo search) keeps a trace when ``metric(gold, pred,
    trace)`` is truthy; a plain dspy.Prediction is truthy whatever its score, so a 0-score result must
    be falsy or every wrong answer would become a demo."""
    from dspy_hero.lm.scripted import scripted_lm
    from dspy_hero.tasks.programs import GenerateProgram

    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t (a INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    metric = infer_metric([dspy.Example(db_path=str(db), gold_sql="SELECT a FROM t")])
    examples = [
        dspy.Example(question=f"q{i}", db_path=str(db), gold_sql="SELECT a FROM t").with_inputs("question")
        for i in range(3)
    ]
    assert not metric(examples[0], dspy.Prediction(sql="SELECT a + 1 FROM t"), [])
    assert metric(examples[0], dspy.Prediction(sql="SELECT a FROM t"), [])
    assert metric(examples[0], dspy.Prediction(sql="SELECT a + 1 FROM t"), []) < 0.5  # score comparisons still work

    program = GenerateProgram("sql", ("question",))
    with dspy.context(lm=scripted_lm(lambda req: {"sql": "SELECT a + 1 FROM t"})):
        compiled = dspy.BootstrapFewShot(metric=metric, max_bootstrapped_demos=2, max_labeled_demos=0).compile(
            program, trainset=examples
        )
    assert all(len(p.demos) == 0 for p in compiled.predictors())


def test_one_reading_of_a_metric_result():
    """score_of / feedback_of read a result exactly as HERO-O's MetricAdapter does (one
    normalize_metric_output): same shapes, same refusal of scores outside [0, 1]."""
    from dspy_hero.metrics.base import MetricAdapter, MetricError, feedback_of, normalize_metric_output

    shapes = [True, 0, 0.25, {"score": 1, "feedback": "ok"}, dspy.Prediction(score=0.5, feedback=3),
              dspy.Prediction(score=1.0)]
    for out in shapes:
        assert (score_of(out), feedback_of(out)) == normalize_metric_output(out)
        metric = (lambda value: lambda gold, pred: value)(out)
        assert MetricAdapter(metric)(None, None) == normalize_metric_output(out)
    assert feedback_of(dspy.Prediction(score=0.5, feedback=3)) == "3"
    for bad in (100.0, float("nan"), {"feedback": "no score"}, "yes", None):
        with pytest.raises(MetricError):
            score_of(bad)
