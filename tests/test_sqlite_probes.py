"""SQLiteEnvironment (HERO-T's SQL world) and schema_text on real SQLite files."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from dspy_hero.execution.base import REJECTED, Environment, Execution
from dspy_hero.execution.sqlite_environment import SQLiteEnvironment, quote_identifier, schema_text


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE customer (id INTEGER PRIMARY KEY, name TEXT NOT NULL, "Home City" TEXT);
        CREATE TABLE "order" (
            order_id INTEGER, customer_id INTEGER REFERENCES customer(id), total REAL,
            -- a comment the compact schema should drop
            PRIMARY KEY (order_id, customer_id)
        );
        CREATE VIEW big_orders AS SELECT * FROM "order" WHERE total > 100;
        INSERT INTO customer VALUES (1, 'Ann', 'Oslo'), (2, 'Bob', 'Lima'), (3, 'O''Neil', NULL);
        INSERT INTO "order" VALUES (10, 1, 50.0), (11, 1, 150.0), (12, 2, 20.5);
        """
    )
    conn.close()
    return path


def test_implements_the_environment_protocol(db):
    env = SQLiteEnvironment(db)
    assert isinstance(env, Environment) and env.language == "sql"
    assert set(env.probes()) == {"schema", "sample_values", "run_subquery"}


def test_schema_text_is_compact_ddl(db):
    text = schema_text(db)
    lines = text.splitlines()
    assert lines[0] == 'CREATE TABLE customer (id INTEGER, name TEXT, "Home City" TEXT, PRIMARY KEY (id));'
    assert lines[1] == (
        'CREATE TABLE "order" (order_id INTEGER, customer_id INTEGER, total REAL, '
        "PRIMARY KEY (order_id, customer_id), FOREIGN KEY (customer_id) REFERENCES customer(id));"
    )
    assert lines[2].startswith("CREATE VIEW big_orders AS SELECT")
    assert "comment" not in text
    assert schema_text(db, tables=["ORDER"]) == lines[1]


def test_schema_text_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        schema_text(tmp_path / "absent.sqlite")


def test_schema_probe(db):
    env = SQLiteEnvironment(db)
    assert env.probe("schema").text == schema_text(db)
    one = env.probe("schema", "Customer")
    assert one.ok and one.text.startswith("CREATE TABLE customer")
    missing = env.probe("schema", "nope")
    assert not missing.ok and "customer" in missing.text


@pytest.mark.parametrize(
    "argument", ["customer.name", "CUSTOMER.NAME", '"customer"."name"', "customer.`name`"]
)
def test_sample_values(db, argument):
    result = SQLiteEnvironment(db).probe("sample_values", argument)
    assert result.ok and "'Ann'" in result.text and '"O\'Neil"' in result.text


def test_sample_values_quotes_odd_names(db):
    env = SQLiteEnvironment(db)
    assert "'Oslo'" in env.probe("sample_values", 'customer."Home City"').text
    assert "150.0" in env.probe("sample_values", '"order".total').text


@pytest.mark.parametrize(
    "argument", ["customer", "customer.nope", "nope.name", "customer.name; DROP TABLE customer", ""]
)
def test_sample_values_bad_arguments_are_clear_and_harmless(db, argument):
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    result = SQLiteEnvironment(db).probe("sample_values", argument)
    assert not result.ok and result.text
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


def test_run_subquery(db):
    env = SQLiteEnvironment(db)
    ok = env.probe("run_subquery", 'SELECT customer_id, sum(total) FROM "order" GROUP BY customer_id')
    assert ok.ok and "returned 2 row(s) with 2 column(s)" in ok.text
    bad = env.probe("run_subquery", "DELETE FROM customer")
    assert not bad.ok and REJECTED in bad.text
    assert env.execute("SELECT count(*) FROM customer").rows == ((3,),)


def test_unknown_probe_and_missing_database(db, tmp_path):
    assert not SQLiteEnvironment(db).probe("explain", "x").ok
    gone = SQLiteEnvironment(tmp_path / "absent.sqlite")
    assert not gone.probe("schema").ok and "not found" in gone.probe("schema").text
    assert gone.execute("SELECT 1").error_type == "EnvironmentError"


def test_execute_unwraps_fenced_answers(db):
    result = SQLiteEnvironment(db).execute("```sql\nSELECT name FROM customer WHERE id = 2;\n```")
    assert result.ok and result.rows == (("Bob",),)


def test_check_gate(db, tmp_path):
    env = SQLiteEnvironment(db, max_rows=2)
    good = env.execute("SELECT name FROM customer WHERE id = 1")
    assert env.check("", good) == (True, "executed without error")
    failed_ok, reason = env.check("", env.execute("SELECT nope FROM customer"))
    assert not failed_ok and "SyntaxError" in reason
    truncated_ok, reason = env.check("", env.execute("SELECT * FROM customer"))
    assert not truncated_ok and "truncated" in reason
    no_columns = Execution(ok=True, rows=(), columns=())
    assert env.check("", no_columns)[0] is False


def test_quote_identifier():
    assert quote_identifier("plain_name1") == "plain_name1"
    assert quote_identifier("Home City") == '"Home City"'
    assert quote_identifier('we"ird') == '"we""ird"'
    assert quote_identifier("order") == '"order"' and quote_identifier("Group") == '"Group"'
