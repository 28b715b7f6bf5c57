"""sql_execution_metric on small real SQLite databases: semantics, calling conventions, feedback
hygiene (no gold leakage by default), gold failures, and thread safety."""

from __future__ import annotations

import logging
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import dspy
import pytest

from dspy_hero.metrics.base import ExecutionMetric
from dspy_hero.metrics.infer import infer_metric
from dspy_hero.metrics.sql import sql_execution_metric

SECRET_CITY = "Zanzibar"
GOLD_SQL = f"SELECT name, city FROM person WHERE city = '{SECRET_CITY}' ORDER BY name"


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "town.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, city TEXT, age INTEGER)")
    conn.executemany(
        "INSERT INTO person VALUES (?, ?, ?, ?)",
        [
            (1, "Ada", SECRET_CITY, 36),
            (2, "Bo", "Lima", 41),
            (3, "Cy", SECRET_CITY, 29),
            (4, "Di", "Oslo", 41),
        ],
    )
    conn.commit()
    conn.close()
    return str(path)


def example(db, gold=GOLD_SQL):
    return dspy.Example(question="Who lives there?", db_id="town", db_path=db, gold_sql=gold).with_inputs(
        "question", "db_id", "db_path"
    )


@pytest.mark.parametrize("semantics", ["bird", "spider"])
def test_correct_prediction_scores_one_with_every_calling_convention(db, semantics):
    metric = sql_execution_metric(semantics)
    assert isinstance(metric, ExecutionMetric) and metric.language == "sql"
    ex, pred = example(db), dspy.Prediction(sql=GOLD_SQL)
    two = metric(ex, pred)
    three = metric(ex, pred, None)
    five = metric(ex, pred, None, "generate", None)  # GEPA's feedback-metric signature
    for result in (two, three, five):
        assert isinstance(result, dspy.Prediction)
        assert result.score == 1.0 and "Correct" in result.feedback


def test_prediction_forms_are_tolerated(db):
    metric = sql_execution_metric()
    ex = example(db)
    fenced = f"Here you go:\n```sql\n{GOLD_SQL};\n```\nThis lists them."
    assert metric(ex, dspy.Prediction(sql=fenced)).score == 1.0
    assert metric(ex, {"sql": GOLD_SQL}).score == 1.0
    assert metric(ex, GOLD_SQL).score == 1.0
    empty = metric(ex, dspy.Prediction(sql=""))
    assert empty.score == 0.0 and "EmptyProgram" in empty.feedback
    assert metric(ex, dspy.Prediction(answer="no sql field")).score == 0.0


def test_bird_and_spider_differ_where_the_benchmarks_do(db):
    bird, spider = sql_execution_metric("bird"), sql_execution_metric("spider")
    ex = example(db)
    swapped = f"SELECT city, name FROM person WHERE city = '{SECRET_CITY}' ORDER BY name"
    assert bird(ex, dspy.Prediction(sql=swapped)).score == 0.0  # BIRD: column order matters
    assert spider(ex, dspy.Prediction(sql=swapped)).score == 1.0  # Spider: permutation allowed
    reordered = f"SELECT name, city FROM person WHERE city = '{SECRET_CITY}' ORDER BY name DESC"
    assert bird(ex, dspy.Prediction(sql=reordered)).score == 1.0  # BIRD: sets
    wrong_order = spider(ex, dspy.Prediction(sql=reordered))
    assert wrong_order.score == 0.0 and "order" in wrong_order.feedback  # gold has ORDER BY
    unordered_gold = example(db, "SELECT age FROM person")
    dup = "SELECT DISTINCT age FROM person"
    assert bird(unordered_gold, dspy.Prediction(sql=dup)).score == 1.0  # duplicates ignored
    assert spider(unordered_gold, dspy.Prediction(sql=dup)).score == 0.0  # multiset
    assert (
        spider(unordered_gold, dspy.Prediction(sql="SELECT age FROM person ORDER BY age DESC")).score == 1.0
    )


@pytest.mark.parametrize("semantics", ["bird", "spider"])
@pytest.mark.parametrize(
    "pred_sql,expected_phrase",
    [
        ("SELECT name FROM person WHERE city = 'Lima'", "column"),
        ("SELECT name, city FROM person WHERE city = 'Lima'", "rows"),
        (f"SELECT name, city FROM person WHERE city != '{SECRET_CITY}'", "values"),
    ],
)
def test_wrong_results_feedback_names_the_property_but_never_the_gold(
    db, semantics, pred_sql, expected_phrase
):
    result = sql_execution_metric(semantics)(example(db), dspy.Prediction(sql=pred_sql))
    assert result.score == 0.0
    assert "differs from the expected" in result.feedback
    assert expected_phrase in result.feedback
    assert "returned" in result.feedback  # the prediction's own result is described
    assert SECRET_CITY not in result.feedback and GOLD_SQL not in result.feedback
    assert "Ada" not in result.feedback and "Cy" not in result.feedback  # expected rows stay hidden


def test_failing_prediction_feedback_names_error_type(db):
    metric = sql_execution_metric()
    bad = metric(example(db), dspy.Prediction(sql="SELECT nam FROM person"))
    assert bad.score == 0.0 and "SyntaxError" in bad.feedback and "nam" in bad.feedback
    write = metric(example(db), dspy.Prediction(sql="DELETE FROM person"))
    assert write.score == 0.0 and "Rejected" in write.feedback
    assert SECRET_CITY not in bad.feedback + write.feedback


def test_timeout_scores_zero(db):
    metric = sql_execution_metric(timeout_s=0.3)
    slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"
    result = metric(example(db), dspy.Prediction(sql=slow))
    assert result.score == 0.0 and "Timeout" in result.feedback


def test_truncated_prediction_scores_zero(db):
    metric = sql_execution_metric(max_rows=3)
    ex = example(db, "SELECT count(*) FROM person")
    result = metric(ex, dspy.Prediction(sql="SELECT * FROM person a, person b"))
    assert result.score == 0.0 and "truncated" in result.feedback


def test_reveal_expected_shows_gold(db):
    result = sql_execution_metric(reveal_expected=True)(example(db), dspy.Prediction(sql="SELECT 1, 2"))
    assert result.score == 0.0 and SECRET_CITY in result.feedback and GOLD_SQL in result.feedback


def test_gold_that_fails_scores_zero_with_a_warning(db, caplog):
    metric = sql_execution_metric()
    ex = example(db, "SELECT * FROM no_such_table")
    with caplog.at_level(logging.WARNING, logger="dspy_hero.metrics.sql"):
        result = metric(ex, dspy.Prediction(sql="SELECT 1"))
    assert result.score == 0.0 and "gold query failed" in result.feedback
    assert "no_such_table" not in result.feedback  # the label stays hidden
    assert any("no_such_table" in rec.getMessage() for rec in caplog.records)


def test_missing_database_and_fields_are_clear_errors(db, tmp_path):
    metric = sql_execution_metric()
    with pytest.raises(FileNotFoundError, match="absent.sqlite"):
        metric(example(str(tmp_path / "absent.sqlite")), dspy.Prediction(sql="SELECT 1"))
    with pytest.raises(KeyError, match="gold_sql"):
        metric(dspy.Example(question="q", db_path=db), dspy.Prediction(sql="SELECT 1"))
    with pytest.raises(ValueError, match="semantics"):
        sql_execution_metric("sqlite")


def test_gold_is_cached_per_metric_not_globally(db):
    first, second = sql_execution_metric(), sql_execution_metric()
    for _ in range(5):
        first(example(db), dspy.Prediction(sql=GOLD_SQL))
    assert len(first.judge._cache) == 1 and len(second.judge._cache) == 0
    first.close()
    assert len(first.judge._cache) == 0


def test_thread_safety(db):
    metric = sql_execution_metric("spider")
    golds = [GOLD_SQL, "SELECT count(*) FROM person", "SELECT age FROM person ORDER BY age"]
    cases = []
    for i in range(120):
        gold = golds[i % 3]
        right = i % 2 == 0
        cases.append((example(db, gold), gold if right else "SELECT 42", right))
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda c: metric(c[0], dspy.Prediction(sql=c[1])).score, cases))
    assert scores == [1.0 if c[2] else 0.0 for c in cases]
    assert len(metric.judge._cache) == 3


def test_works_with_dspy_evaluate_and_infer_metric(db):
    from dspy_hero.lm.scripted import scripted_lm
    from dspy_hero.tasks.programs import GenerateProgram

    answers = {"who": GOLD_SQL, "count": "SELECT count(*) FROM persons"}
    lm = scripted_lm(lambda req: {"sql": f"```sql\n{answers[req.inputs['question']]}\n```"})
    devset = [
        dspy.Example(question="who", db_path=db, gold_sql=GOLD_SQL).with_inputs("question", "db_path"),
        dspy.Example(question="count", db_path=db, gold_sql="SELECT count(*) FROM person").with_inputs(
            "question", "db_path"
        ),
    ]
    metric = infer_metric(devset)
    assert metric.language == "sql" and metric.semantics == "bird"
    program = GenerateProgram("sql", ["question"])
    with dspy.context(lm=lm):
        result = dspy.Evaluate(devset=devset, metric=metric, num_threads=2, display_progress=False)(program)
    assert result.score == 50.0


@pytest.mark.parametrize("semantics", ["bird", "spider"])
def test_two_empty_results_are_equal(db, semantics):
    ex = example(db, "SELECT name FROM person WHERE age > 100")
    result = sql_execution_metric(semantics)(ex, dspy.Prediction(sql="SELECT city, age FROM person WHERE 0"))
    assert result.score == 1.0


def test_empty_prediction_result_against_nonempty_gold(db):
    result = sql_execution_metric("spider")(example(db), dspy.Prediction(sql="SELECT name, city FROM person WHERE 0"))
    assert result.score == 0.0 and "returned 0 row(s)" in result.feedback and "number of rows" in result.feedback
