"""SQL diagnosis facts, each on a real SQLite database run through the read-only executor."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from dspy_hero.diagnosis import Category, Diagnoser, diagnose
from dspy_hero.fields import read_unlabeled
from dspy_hero.execution.sqlite_environment import SQLiteEnvironment
from dspy_hero.tasks.hub import shared_benchmarks_dir

BENCH = shared_benchmarks_dir()
SHAPES = {Category.EMPTY_RESULT, Category.NULL_COLUMN, Category.DUPLICATE_ROWS}

SCHEMA = """
CREATE TABLE stadium (stadium_id INTEGER PRIMARY KEY, location TEXT, name TEXT, capacity INTEGER);
CREATE TABLE singer (singer_id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER, nickname TEXT);
CREATE TABLE concert (concert_id INTEGER PRIMARY KEY, concert_name TEXT, year INTEGER,
                      stadium_id INTEGER REFERENCES stadium(stadium_id));
CREATE TABLE singer_in_concert (concert_id INTEGER REFERENCES concert(concert_id),
                                singer_id INTEGER REFERENCES singer(singer_id));
INSERT INTO stadium VALUES (1, 'Glasgow', 'Hampden', 50000), (2, 'Leeds', 'Elland', 37000);
INSERT INTO singer VALUES (1, 'Ann', 'France', 30, NULL), (2, 'Bob', 'France', 40, NULL), (3, 'Cid', 'Peru', 50, NULL);
INSERT INTO concert VALUES (1, 'Spring', 2014, 1), (2, 'Autumn', 2015, 2);
INSERT INTO singer_in_concert VALUES (1, 1), (1, 2), (2, 2);
"""


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("diag") / "concerts.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.commit()
    conn.close()
    return str(path)


@pytest.fixture(scope="module")
def env(db):
    return SQLiteEnvironment(db)


def facts(env, sql, **kw):
    d = diagnose("sql", {}, sql, environment=env, **kw)
    first: dict = {}
    for fact in d.facts:
        first.setdefault(fact.category, fact.text)
    return d, first


def test_column_read_through_the_wrong_table_names_the_tables_that_have_it(env):
    d, f = facts(env, "SELECT T2.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id")
    assert d.primary is Category.COLUMN_NOT_IN_TABLE
    assert f[Category.COLUMN_NOT_IN_TABLE] == (
        "column `name` is not in `singer_in_concert`; tables that have it: `stadium`, `singer` (joined here: `singer`)")
    # the engine's "no such column" is explained by that fact: not counted again as a syntax error
    assert Category.SYNTAX_ERROR not in f and Category.UNKNOWN_COLUMN not in f
    assert Category.UNUSED_TABLE not in f  # which table is "used" is itself wrong here


def test_unqualified_column_of_a_table_not_joined(env):
    _, f = facts(env, "SELECT concert_name FROM singer_in_concert")
    assert f[Category.COLUMN_FROM_UNJOINED_TABLE] == (
        "column `concert_name` is in none of the joined tables (`singer_in_concert`); tables that have it: `concert`")
    _, f = facts(env, "SELECT concert.year FROM singer")
    assert f[Category.COLUMN_FROM_UNJOINED_TABLE] == "`concert.year` names table `concert`, which the query does not join"


def test_unknown_column_and_table_suggest_the_schema_spelling(env):
    _, f = facts(env, "SELECT nam FROM singer")
    assert f[Category.UNKNOWN_COLUMN] == "no table has a column `nam`; similar columns in `singer`: `name`"
    _, f = facts(env, "SELECT S.nam FROM singer AS S")
    assert f[Category.UNKNOWN_COLUMN] == "no table has a column `nam` (used as `S.nam`); similar columns in `singer`: `name`"
    _, f = facts(env, "SELECT COUNT(*) FROM singers")
    assert f[Category.UNKNOWN_TABLE] == "table `singers` does not exist; similar tables: `singer`, `singer_in_concert`"


def test_ambiguous_unqualified_column(env):
    _, f = facts(env, "SELECT name FROM singer JOIN stadium ON singer.singer_id = stadium.stadium_id")
    assert f[Category.AMBIGUOUS_COLUMN] == "unqualified column `name` is in several joined tables: `singer`, `stadium`"


def test_tables_joined_without_a_linking_condition(env):
    _, f = facts(env, "SELECT T1.name FROM singer AS T1, concert AS T2")
    assert f[Category.UNLINKED_JOIN].startswith("`concert` is joined with no condition linking it to `singer`")
    # linked through a chain: no fact
    _, f = facts(env, "SELECT T1.name, T3.concert_name FROM singer AS T1 JOIN singer_in_concert AS T2 ON "
                 "T1.singer_id = T2.singer_id JOIN concert AS T3 ON T2.concert_id = T3.concert_id")
    assert Category.UNLINKED_JOIN not in f and Category.JOIN_NOT_ON_KEY not in f
    assert Category.UNUSED_TABLE not in f  # a bridge table joins two others: it is used


def test_join_on_columns_that_are_not_the_foreign_key(env):
    _, f = facts(env, "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.concert_id")
    assert f[Category.JOIN_NOT_ON_KEY] == ("`singer` and `singer_in_concert` are joined on `singer_id` = `concert_id`; "
                                           "the schema links them by `singer.singer_id` = `singer_in_concert.singer_id`")


def test_a_table_joined_only_for_its_key(env):
    _, f = facts(env, "SELECT T1.country FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id")
    assert f[Category.UNUSED_TABLE].startswith("`singer_in_concert` is joined but only its join key is used")
    _, f = facts(env, "SELECT T1.country FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id "
                 "WHERE T2.concert_id = 1")
    assert Category.UNUSED_TABLE not in f


def test_aggregate_next_to_a_plain_column_without_group_by(env):
    _, f = facts(env, "SELECT country, COUNT(*) FROM singer")
    assert f[Category.AGGREGATE_WITHOUT_GROUP_BY].startswith("selects `country` next to COUNT(*) without GROUP BY")
    _, f = facts(env, "SELECT country, COUNT(*) FROM singer GROUP BY country")
    assert Category.AGGREGATE_WITHOUT_GROUP_BY not in f


def test_result_shapes_empty_null_only_and_repeated_rows(env):
    _, f = facts(env, "SELECT name FROM singer WHERE age > 100")
    assert f == {Category.EMPTY_RESULT: "the query returned no rows"}
    _, f = facts(env, "SELECT name, nickname FROM singer")
    assert f[Category.NULL_COLUMN] == "column(s) `nickname` are NULL in all 3 returned row(s)"
    _, f = facts(env, "SELECT country FROM singer")
    assert f[Category.DUPLICATE_ROWS] == "1 of the 3 returned rows repeat an earlier row"
    _, f = facts(env, "SELECT DISTINCT country FROM singer")
    assert f == {}
    _, f = facts(env, "SELECT COUNT(*) FROM singer GROUP BY age")  # equal counts of different groups: not repeats
    assert f == {}


def test_the_metric_feedback_property_is_tied_to_the_clauses_that_decide_it(env):
    _, f = facts(env, "SELECT name, country, age FROM singer",
                 feedback="The query ran but its result differs from the expected one (different number of columns).")
    assert f[Category.WRONG_COLUMN_COUNT].startswith("selects 3 column(s) (`name`, `country`, `age`)")
    _, f = facts(env, "SELECT name FROM singer ORDER BY age LIMIT 2", feedback="(different number of rows)")
    assert f[Category.WRONG_ROW_COUNT].startswith("returns 2 row(s) (LIMIT 2")
    _, f = facts(env, "SELECT name FROM singer", feedback="(same rows but in a different order, and the order matters)")
    assert f[Category.WRONG_ORDER] == "rows are right but ordered arbitrarily (no ORDER BY)"
    _, f = facts(env, "SELECT name FROM singer")
    assert f == {}  # no feedback: no property fact


def test_syntax_error_location(env):
    d, f = facts(env, "SELECT name FROM singer WHERE")
    assert d.primary is Category.SYNTAX_ERROR and "incomplete input" in f[Category.SYNTAX_ERROR]
    d, f = facts(env, "SELEC name FROM singer")
    assert f[Category.SYNTAX_ERROR].endswith("(near `SELEC`)")
    d = diagnose("sql", {}, "", environment=env)
    assert d.primary is Category.EMPTY_PROGRAM


def test_a_text_function_compared_with_a_number(env):
    # no schema needed: SQLite never converts a function's text result for a number literal
    for sql in ("SELECT name FROM concert WHERE STRFTIME('%Y', concert_name) = 2014",
                "SELECT COUNT(*) FROM concert WHERE SUBSTR(concert_name, 1, 2) IN (1, 2)"):
        _, f = facts(env, sql)
        assert "compares the text" in f[Category.TEXT_COMPARED_WITH_NUMBER], sql
        assert Category.TEXT_COMPARED_WITH_NUMBER in {x.category for x in diagnose("sql", {}, sql).facts}
    for sql in ("SELECT name FROM concert WHERE STRFTIME('%Y', concert_name) = '2014'",
                "SELECT name FROM concert WHERE STRFTIME('%Y', concert_name) = year",
                "SELECT name FROM concert WHERE STRFTIME('%Y', 'now') - year > 5"):
        _, f = facts(env, sql)
        assert Category.TEXT_COMPARED_WITH_NUMBER not in f, sql


def test_correct_queries_get_no_schema_fact(env):
    for sql in (
        "SELECT T1.name FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id WHERE T2.concert_id = 2",
        "WITH f AS (SELECT name FROM singer WHERE country = 'France') SELECT name FROM f",
        "SELECT name FROM (SELECT name, age FROM singer) WHERE age > 35",
        "SELECT name FROM singer WHERE singer_id IN (SELECT singer_id FROM singer_in_concert WHERE concert_id = singer.singer_id)",
        "SELECT country, COUNT(*) AS n FROM singer GROUP BY country ORDER BY n DESC",
        "SELECT name FROM singer UNION SELECT name FROM stadium",
        "SELECT name, RANK() OVER (ORDER BY age) FROM singer",  # a window function is not a grouping aggregate
        "SELECT name, (SELECT MAX(age) FROM singer) FROM singer",  # nor is a scalar subquery's
        "SELECT name, MAX(age) FROM singer",  # SQLite's bare-column rule: the name of the oldest
        ("SELECT name FROM singer WHERE singer_id IN (SELECT T1.singer_id FROM singer AS T1 JOIN singer_in_concert AS T2 "
        "ON T1.singer_id = T2.singer_id)"),  # a key-only join inside IN: duplicates cannot matter
        'SELECT name FROM singer WHERE country LIKE "%an%"',  # SQLite reads the double-quoted name as a string
    ):
        d = diagnose("sql", {}, sql, environment=env)
        assert d.facts == (), (sql, d.facts)


def test_structure_line_names_the_clauses(env):
    d = diagnose("sql", {}, "SELECT DISTINCT country, COUNT(*) FROM singer GROUP BY country ORDER BY 2 DESC LIMIT 1",
                 environment=env)
    assert d.structure == ("selects 2 column(s) (`country`, `COUNT(*)`); from `singer`; aggregates COUNT; DISTINCT; "
                           "GROUP BY `country`; ORDER BY 2 DESC; LIMIT 1")


def test_reference_diff_only_when_a_reference_is_passed(env, db):
    pred = "SELECT name FROM singer"
    gold = "SELECT COUNT(DISTINCT T1.name) FROM singer AS T1 JOIN singer_in_concert AS T2 ON T1.singer_id = T2.singer_id"
    d = diagnose("sql", {"db_path": db, "gold_sql": gold}, pred)  # a label on the inputs is never read
    assert not any(f.category.from_reference for f in d.facts)
    d = diagnose("sql", {"db_path": db}, pred, reference=gold)
    cats = {f.category: f.text for f in d.facts}
    assert cats[Category.REF_MISSING_TABLE] == "the reference uses `singer_in_concert`, the prediction does not"
    assert cats[Category.REF_AGGREGATE] == "the reference aggregates with COUNT(DISTINCT), the prediction with nothing"
    assert d.label_free_only().facts == ()
    with pytest.raises(ValueError, match="never reads label"):
        read_unlabeled({"gold_sql": gold}, "gold_sql", "the diagnosis")


@pytest.mark.parametrize("pred, gold, category, text", [
    ("SELECT SUM(price_cents) FROM orders", "SELECT SUM(price_cents) / 100.0 FROM orders", Category.REF_COLUMN_FORM,
     "the reference reads `price_cents` as `SUM(price_cents) / 100.0`, the prediction uses it as stored"),
    ("SELECT COUNT(*) FROM o WHERE strftime('%Y', d) = '2023'", "SELECT COUNT(*) FROM o WHERE substr(d, 7, 4) = '2023'",
     Category.REF_COLUMN_FORM, "the reference reads `d` as `SUBSTRING(d, 7, 4)`, the prediction as `STRFTIME('%Y', d)`"),
    ("SELECT name FROM m WHERE is_active = 1", "SELECT name FROM m WHERE T.is_active = 'Y'", Category.REF_COMPARED_VALUE,
     "the reference compares `is_active` with 'Y', the prediction with 1"),
    ("SELECT COUNT(*) FROM f WHERE category = 'Wool'", "SELECT COUNT(*) FROM f i WHERE i.category = 'Wool' AND "
     "i.archived_at IS NULL", Category.REF_FILTER, "the reference adds the condition `archived_at IS NULL`; the "
     "prediction has no condition on `archived_at`"),
    ("SELECT 1 FROM o WHERE status IN ('delivered', 'sent')", "SELECT 1 FROM o WHERE status IN ('DLV')",
     Category.REF_COMPARED_VALUE, "the reference compares `status` with 'DLV', the prediction with 'delivered', 'sent'"),
    ("SELECT SUM(p.amount) FROM purchases p JOIN members m ON p.member_id = m.member_id WHERE m.country = 'Kuwait'",
     "SELECT SUM(t.amount) / 1000.0 FROM purchases t", Category.REF_EXTRA_FILTER,
     "the prediction adds the condition `country = 'Kuwait'`; the reference has no condition on `country`"),
])
def test_reference_diff_names_conventions_the_schema_hides(pred, gold, category, text):
    """Stored-value conventions (minor units, text dates, flag and code spellings) show up only as how a
    column is read or compared; a structural diff alone would call these queries alike."""
    facts = {f.category: f.text for f in diagnose("sql", {}, pred, reference=gold).facts}
    assert facts.get(category) == text


@pytest.mark.parametrize("pred, gold", [
    ("SELECT SUM(price_cents) / 100.0 FROM orders", "SELECT SUM(T.price_cents) / 100.0 FROM orders"),
    ("SELECT name FROM m WHERE is_active IN ('Y', 'y')", "SELECT name FROM m WHERE is_active = 'Y'"),
    ("SELECT COUNT(*) FROM o WHERE strftime('%Y', d) = '2023'", "SELECT COUNT(*) FROM o WHERE d > 3"),
])
def test_reference_diff_is_quiet_when_the_column_is_read_alike(pred, gold):
    cats = {f.category for f in diagnose("sql", {}, pred, reference=gold).facts}
    assert not cats & {Category.REF_COLUMN_FORM, Category.REF_COMPARED_VALUE}


def test_an_extra_condition_is_its_own_fact_and_a_missing_one_is_not_it():
    """A prediction that filters on a column the reference does not (the 1.5B model reading a currency
    as a country) is told apart from one that lacks the reference's filter, and a condition on a
    column both filter (other values) is neither."""
    def cats(pred, gold):
        return {f.category for f in diagnose("sql", {}, pred, reference=gold).facts}
    lacking = cats("SELECT COUNT(*) FROM f", "SELECT COUNT(*) FROM f WHERE archived_at IS NULL")
    assert Category.REF_FILTER in lacking and Category.REF_EXTRA_FILTER not in lacking
    both = cats("SELECT COUNT(*) FROM f WHERE archived_at IS NULL AND country = 'FR'",
                "SELECT COUNT(*) FROM f WHERE archived_at IS NULL AND is_active = 1")
    assert {Category.REF_FILTER, Category.REF_EXTRA_FILTER} <= both
    assert Category.REF_EXTRA_FILTER not in cats("SELECT 1 FROM f WHERE country = 'FR'", "SELECT 1 FROM f WHERE country = 'FRA'")


def test_environment_built_from_the_case_fields_and_reused(db):
    with Diagnoser() as dg:
        d1 = dg.diagnose(None, {"db_path": db}, "SELECT nam FROM singer")
        d2 = dg.diagnose(None, {"db_path": db}, "SELECT nam FROM singer")
        assert len(dg._envs) == 1
    assert d1 == d2 and d1.language == "sql" and d1.primary is Category.UNKNOWN_COLUMN
    missing = diagnose("sql", {"db_path": db + ".absent"}, "SELECT COUNT(*) FROM singer GROUP BY 1")
    assert "database file not found" in missing.errors[0] and missing.primary is Category.ENVIRONMENT_ERROR
    bare = diagnose("sql", {}, "SELECT country, COUNT(*) FROM singer")  # no environment at all: text-only facts
    assert bare.primary is Category.AGGREGATE_WITHOUT_GROUP_BY and "no environment references" in bare.errors[0]


def _gold_findings(examples) -> tuple[int, Counter]:
    counts: Counter = Counter()
    flagged = 0
    with Diagnoser() as dg:
        for ex in examples:
            cats = [f.category for f in dg.diagnose("sql", {"db_path": ex.db_path}, ex.gold_sql).facts
                    if f.category not in SHAPES]
            flagged += bool(cats)
            counts.update(cats)
    return flagged, counts


@pytest.mark.skipif(not (BENCH / "spider" / "dev.json").is_file(), reason="shared Spider data absent")
def test_spider_gold_queries_are_almost_never_flagged():
    """Precision on real data: a correct query should get no schema or join fact. The two Spider gold
    queries flagged join a table only to keep the rows that have a match (a real repeat-or-drop join)."""
    from dspy_hero.tasks.spider import read_spider

    examples, _ = read_spider(BENCH / "spider", "dev.json")
    flagged, counts = _gold_findings(examples)
    assert len(examples) > 400 and flagged <= 2, counts
    assert set(counts) <= {Category.UNUSED_TABLE}


@pytest.mark.skipif(not (BENCH / "bird" / "mini_dev").is_dir(), reason="shared BIRD data absent")
def test_bird_gold_queries_are_almost_never_flagged():
    from dspy_hero.tasks.bird import read_bird

    examples, _ = read_bird(BENCH / "bird", "mini_dev")
    flagged, counts = _gold_findings(examples)
    assert len(examples) == 500 and flagged <= 5, counts
    assert not counts.keys() & {Category.COLUMN_NOT_IN_TABLE, Category.UNKNOWN_COLUMN, Category.UNKNOWN_TABLE,
                                Category.COLUMN_FROM_UNJOINED_TABLE, Category.AMBIGUOUS_COLUMN, Category.UNLINKED_JOIN,
                                Category.JOIN_NOT_ON_KEY}, counts
