"""Issue 12, class G for SQL and Cypher: every SQL and Cypher metric (execution accuracy, VES, R-VES)
returns a score in [0, 1] (VES: a finite reward) for any prediction text — arbitrary Unicode with
lone surrogates, NULs, binary junk, huge literals, the class E/F attacks, and non-string fields —
and never scores a wrong prediction 1. Real SQLite and the real embedded FalkorDB; Hypothesis
generates the texts."""

from __future__ import annotations

import math
import sqlite3

import dspy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspy_hero.execution.cypher import FalkorDBExecutor
from dspy_hero.metrics.base import score_of
from dspy_hero.metrics.cypher import cypher_execution_metric
from dspy_hero.metrics.sql import sql_execution_metric
from dspy_hero.metrics.ves import r_ves, r_ves_reward, ves, ves_reward

GOLD_SQL = "SELECT name FROM person WHERE age > 30 ORDER BY name"
GOLD_CYPHER = "MATCH (p:Person) WHERE p.age > 30 RETURN p.name ORDER BY p.name"

any_char = st.characters(exclude_categories=())  # includes lone surrogates (category Cs)
junk_bytes = st.binary(max_size=200).map(lambda b: b.decode("utf-8", errors="surrogateescape"))
surrogate = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
# query-like text with lone surrogates spliced in (plain st.text rarely draws category Cs)
with_surrogates = st.builds(
    lambda head, parts: head + "".join(parts),
    st.sampled_from(["SELECT '", "RETURN '", "MATCH (n) WHERE n.x = '", "SELECT 1 -- ", "RETURN 1 // ", ""]),
    st.lists(st.one_of(surrogate, any_char, st.sampled_from(["'", "(", ")", "`", ";", "\x00"])), min_size=1, max_size=30),
)
huge = st.sampled_from(
    [
        "SELECT '" + "x" * 300_000 + "'",
        "SELECT " + "-" * 100_000 + "1",
        "SELECT " + "(" * 5000 + "1" + ")" * 5000,
        "RETURN " + "[" * 50000 + "1" + "]" * 50000,
        "RETURN " + "-" * 30 + "1",
        "RETURN '\ud800'",
        "SELECT '\ud800'",
        "x = " + "-" * 100000 + "1",
        "SELECT length(printf('%.*c', 2000000000, 'x'))",
        "SELECT " + ", ".join(["randomblob(200000000)"] * 6),
        "CALL`db.idx.fulltext.createNodeIndex`('Person', 'name')",
        "```sql\n" + "\x00" * 1000 + "\n```",
        "```cypher\nMATCH (n) RETURN n\n",
        "[[ ## sql ## ]]\ufeff\u202e SELECT 1 \udfff",
    ]
)
program_text = st.one_of(
    st.text(alphabet=any_char, max_size=300),
    with_surrogates,
    junk_bytes,
    huge,
    st.builds(lambda a, b: f"```sql\n{a}\n```{b}", st.text(alphabet=any_char, max_size=80), st.text(max_size=20)),
    st.builds(lambda q, s: q + s, st.sampled_from([GOLD_SQL, GOLD_CYPHER, "SELECT ", "MATCH (n) RETURN "]), st.text(alphabet=any_char, max_size=40)),
)
field_value = st.one_of(program_text, st.none(), st.integers(), st.binary(max_size=50), st.lists(st.integers(), max_size=3))
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("never") / "people.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)")
    conn.executemany("INSERT INTO person VALUES (?, ?, ?)", [(1, "Ann", 25), (2, "Bob", 35), (3, "Cid", 45)])
    conn.commit()
    conn.close()
    return str(path)


@pytest.fixture(scope="module")
def engine():
    with FalkorDBExecutor(timeout_s=3.0, max_rows=1000) as ex:
        ex.load_graph("people", {"nodes": [
            {"id": i, "labels": ["Person"], "properties": {"name": n, "age": a}}
            for i, (n, a) in enumerate([("Ann", 25), ("Bob", 35), ("Cid", 45)])
        ]})
        yield ex


def _prediction(field: str, value) -> object:
    return dspy.Prediction(**{field: value})


def _assert_score(result, gold_text, text) -> None:
    value = score_of(result)
    assert 0.0 <= value <= 1.0
    assert isinstance(result.feedback, str) and result.feedback
    if value == 1.0:  # only a prediction giving the gold's answer may pass; none of ours do unless it is the gold
        assert isinstance(text, str) and gold_text in text, text


@pytest.mark.parametrize("semantics", ["bird", "spider"])
@PROPERTY
@given(text=field_value)
def test_sql_metric_always_scores(db, semantics, text):
    metric = sql_execution_metric(semantics=semantics, timeout_s=1.0)
    example = dspy.Example(question="q", db_path=db, gold_sql=GOLD_SQL).with_inputs("question", "db_path")
    _assert_score(metric(example, _prediction("sql", text)), GOLD_SQL, text)
    if isinstance(text, str):
        _assert_score(metric(example, text), GOLD_SQL, text)  # a bare string as the prediction


@PROPERTY
@given(text=field_value)
def test_cypher_metric_always_scores(engine, text):
    metric = cypher_execution_metric(engine=engine)
    example = dspy.Example(question="q", graph="people", gold_cypher=GOLD_CYPHER).with_inputs("question", "graph")
    _assert_score(metric(example, _prediction("cypher", text)), GOLD_CYPHER, text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=field_value)
def test_ves_and_r_ves_always_score(db, text):
    example = dspy.Example(db_path=db, gold_sql=GOLD_SQL)
    pred = _prediction("sql", text)
    for corpus in (ves, r_ves):
        result = corpus([example], [pred], repetitions=2, timeout_s=1.0)
        assert math.isfinite(result.score) and 0.0 <= result.score <= 125.0
        assert len(result.details) == 1
    if isinstance(text, str):
        for single in (ves_reward, r_ves_reward):
            reward = single(GOLD_SQL, text, db, repetitions=2, timeout_s=1.0)
            assert math.isfinite(reward) and reward >= 0.0


def test_the_issue_cases_score_zero(db, engine):
    """The exact crashes of the issue: a surrogate reaching FalkorDB, a huge unary chain, a lone
    surrogate in SQL."""
    cy = cypher_execution_metric(engine=engine)
    cy_example = dspy.Example(graph="people", gold_cypher=GOLD_CYPHER)
    for text in ("RETURN '\ud800'", "MATCH (p) RETURN p.name // \udfff"):
        result = cy(cy_example, _prediction("cypher", text))
        assert score_of(result) == 0.0 and "Unicode" in result.feedback
    sq = sql_execution_metric()
    sq_example = dspy.Example(db_path=db, gold_sql=GOLD_SQL)
    for text in ("SELECT '\ud800'", "x = " + "-" * 100000 + "1", "SELECT length(printf('%.*c', 2000000000, 'x'))"):
        assert score_of(sq(sq_example, _prediction("sql", text))) == 0.0
    assert score_of(sq(sq_example, _prediction("sql", GOLD_SQL))) == 1.0
    assert score_of(cy(cy_example, _prediction("cypher", "MATCH (p:Person) WHERE p.age > 30 RETURN p.name ORDER BY p.name"))) == 1.0
