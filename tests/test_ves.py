"""BIRD VES and mini-dev R-VES on a real SQLite database with a fast and a slow form of one query."""

from __future__ import annotations

import math
import sqlite3

import dspy
import pytest

from dspy_hero.metrics.ves import (
    drop_outliers,
    r_ves,
    r_ves_bucket,
    r_ves_reward,
    time_ratio,
    ves,
    ves_reward,
)

FAST = "SELECT b FROM t WHERE a = 4321"  # primary-key lookup
SLOW = "SELECT b FROM t WHERE a + 0 = 4321"  # same answer, full scan


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("ves") / "ves.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER)")
    conn.executemany("INSERT INTO t VALUES (?, ?)", ((i, i % 97) for i in range(100_000)))
    conn.commit()
    conn.close()
    return str(path)


@pytest.mark.parametrize(
    "ratio,reward",
    [
        (5.0, 1.25),
        (2.0, 1.25),
        (1.999, 1.0),
        (1.0, 1.0),
        (0.999, 0.75),
        (0.5, 0.75),
        (0.49, 0.5),
        (0.25, 0.5),
        (0.2499, 0.25),
        (0.0, 0.25),
    ],
)
def test_r_ves_buckets(ratio, reward):
    assert r_ves_bucket(ratio) == reward


def test_drop_outliers():
    values = [1.0] * 20 + [100.0]
    assert drop_outliers(values) == [1.0] * 20
    assert drop_outliers([1.0, 50.0]) == [1.0, 50.0]  # too few to judge
    assert drop_outliers([2.0] * 5) == [2.0] * 5


def test_faster_prediction_earns_more_than_one(db):
    ratio = time_ratio(SLOW, FAST, db, repetitions=5)
    assert ratio is not None and ratio > 2.0
    assert ves_reward(SLOW, FAST, db, repetitions=5) > math.sqrt(2.0)
    assert r_ves_reward(SLOW, FAST, db, repetitions=5) == 1.25


def test_slower_prediction_earns_less_than_one(db):
    assert ves_reward(FAST, SLOW, db, repetitions=5) < math.sqrt(0.5)
    assert r_ves_reward(FAST, SLOW, db, repetitions=5) <= 0.5


def test_incorrect_or_failing_prediction_earns_zero(db):
    assert ves_reward(FAST, "SELECT b + 1 FROM t WHERE a = 4321", db) == 0.0
    assert r_ves_reward(FAST, "SELECT nope FROM t", db) == 0.0
    assert time_ratio(FAST, "DELETE FROM t", db) is None


def test_corpus_scores_and_details(db):
    examples = [
        dspy.Example(question="q1", db_path=db, gold_sql=SLOW).with_inputs("question"),
        {"question": "q2", "db_path": db, "gold_sql": FAST},
        {"question": "q3", "db_path": db, "gold_sql": FAST},
    ]
    predictions = [dspy.Prediction(sql=f"```sql\n{FAST}\n```"), {"sql": "SELECT 0"}, FAST]
    result = ves(examples, predictions, repetitions=4)
    assert result.kind == "ves" and result.repetitions == 4 and len(result.details) == 3
    first, second, third = result.details
    assert first.correct and first.ratio > 2 and first.reward == pytest.approx(math.sqrt(first.ratio))
    assert not second.correct and second.reward == 0.0 and second.ratio is None
    assert third.correct and third.reward > 0
    assert result.score == pytest.approx(100 * (first.reward + third.reward) / 3)
    assert result.accuracy == pytest.approx(200 / 3)
    bucketed = r_ves(examples, predictions, repetitions=4)
    assert bucketed.kind == "r_ves" and 0 < bucketed.score <= 125
    assert bucketed.details[0].reward == 1.25 and bucketed.details[1].reward == 0.0


def test_bad_input_is_a_clear_error(db, tmp_path):
    with pytest.raises(ValueError, match="predictions"):
        ves([{"db_path": db, "gold_sql": FAST}], [])
    with pytest.raises(ValueError, match="repetitions"):
        ves_reward(FAST, FAST, db, repetitions=0)
    with pytest.raises(FileNotFoundError):
        ves_reward(FAST, FAST, str(tmp_path / "absent.sqlite"))
    with pytest.raises(KeyError, match="gold_sql"):
        r_ves([{"db_path": db}], [{"sql": FAST}])
