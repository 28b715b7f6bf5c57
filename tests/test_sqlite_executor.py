"""SQLiteExecutor on real SQLite files built per test: results, error types, caps, timeouts, threads."""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dspy_hero.execution.base import (
    EMPTY_PROGRAM,
    ENVIRONMENT,
    REJECTED,
    RESOURCE,
    RUNTIME,
    SYNTAX,
    TIMEOUT,
    Executor,
)
from dspy_hero.execution.sqlite import SQLiteExecutor, split_single_statement


def make_db(path, rows=100):
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city TEXT)")
    conn.executemany(
        "INSERT INTO person VALUES (?, ?, ?, ?)",
        [(i, f"name{i}", 20 + i % 50, ["Oslo", "Lima", "Pune"][i % 3]) for i in range(rows)],
    )
    conn.commit()
    conn.close()
    return str(path)


@pytest.fixture
def db(tmp_path):
    return make_db(tmp_path / "people.sqlite")


def test_select_returns_rows_and_columns(db):
    ex = SQLiteExecutor(db)
    assert isinstance(ex, Executor)
    r = ex.run("SELECT id, name AS who FROM person WHERE id < 3 ORDER BY id")
    assert r.ok and r.error_type is None
    assert r.rows == ((0, "name0"), (1, "name1"), (2, "name2"))
    assert r.columns == ("id", "who")
    assert not r.truncated and r.runtime_s >= 0
    assert "returned 3 row(s) with 2 column(s)" in r.describe()


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT count(*) FROM person;",
        "SELECT count(*) FROM person;;",
        "SELECT count(*) FROM person; -- done",
        "SELECT count(*) FROM person /* c */ ; /* more */\n",
        "  -- lead\nSELECT count(*) FROM person",
    ],
)
def test_trailing_semicolons_and_comments_are_fine(db, sql):
    r = SQLiteExecutor(db).run(sql)
    assert r.ok, r.describe()
    assert r.rows == ((100,),)


def test_strings_with_semicolons_are_one_statement(db):
    r = SQLiteExecutor(db).run("SELECT 'a;b', '--x' ;")
    assert r.ok and r.rows == (("a;b", "--x"),)


@pytest.mark.parametrize("sql", ["SELECT 1; SELECT 2", "SELECT 1;\nSELECT 2;", "SELECT 1;; SELECT 2"])
def test_multiple_statements_rejected(db, sql):
    r = SQLiteExecutor(db).run(sql)
    assert not r.ok and r.error_type == REJECTED
    assert "one SQL statement" in r.error_message


def test_split_single_statement():
    assert split_single_statement("SELECT ';'; SELECT 2") == ("SELECT ';';", " SELECT 2")
    assert split_single_statement("SELECT 1") == ("SELECT 1", "")


@pytest.mark.parametrize("sql", ["", "   ", ";", " ; -- nothing\n", "/* only a comment */", None])
def test_empty_program(db, sql):
    r = SQLiteExecutor(db).run(sql)
    assert r.error_type == EMPTY_PROGRAM and not r.ok


@pytest.mark.parametrize(
    "sql",
    [
        "SELEC name FROM person",
        "SELECT name FROM",
        "SELECT nope FROM person",
        "SELECT * FROM missing_table",
        "SELECT name FROM person WHERE",
        "SELECT no_such_fn(1)",
    ],
)
def test_syntax_and_name_errors(db, sql):
    r = SQLiteExecutor(db).run(sql)
    assert not r.ok and r.error_type == SYNTAX, r
    assert r.error_message


def test_runtime_error(db):
    r = SQLiteExecutor(db).run("SELECT abs(-9223372036854775807 - 1)")
    assert not r.ok and r.error_type == RUNTIME and "overflow" in r.error_message


def test_nul_character_is_a_clear_error(db):
    r = SQLiteExecutor(db).run("SELECT 'a\x00b'")
    assert not r.ok and r.error_type == RUNTIME


def test_oversized_value_is_a_resource_error(db):
    r = SQLiteExecutor(db).run("SELECT length(zeroblob(400000000))")
    assert not r.ok and r.error_type == RESOURCE


def test_missing_database_is_environment_error(tmp_path):
    ex = SQLiteExecutor(tmp_path / "absent.sqlite")
    assert not ex.exists()
    r = ex.run("SELECT 1")
    assert r.error_type == ENVIRONMENT and "not found" in r.error_message
    assert not (tmp_path / "absent.sqlite").exists()  # read-only open never creates the file
    with pytest.raises(FileNotFoundError):
        ex.session()


def test_not_a_database_is_environment_error(tmp_path):
    bogus = tmp_path / "bogus.sqlite"
    bogus.write_bytes(b"this is not a database file at all" * 100)
    r = SQLiteExecutor(bogus).run("SELECT 1 FROM sqlite_master")
    assert not r.ok and r.error_type == ENVIRONMENT


def test_bad_arguments():
    with pytest.raises(ValueError):
        SQLiteExecutor("x.db", timeout_s=0)
    with pytest.raises(ValueError):
        SQLiteExecutor("x.db", max_rows=-1)


def test_row_cap_truncates(db):
    r = SQLiteExecutor(db, max_rows=10).run("SELECT * FROM person")
    assert r.ok and r.truncated and r.row_count == 10
    exact = SQLiteExecutor(db, max_rows=100).run("SELECT * FROM person")
    assert exact.ok and not exact.truncated and exact.row_count == 100


def test_timeout_stops_runaway_query(db):
    start = time.monotonic()
    r = SQLiteExecutor(db, timeout_s=0.3).run(
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
    )
    elapsed = time.monotonic() - start
    assert r.error_type == TIMEOUT and not r.ok
    assert elapsed < 3.0


def test_watchdog_interrupts_without_progress_handler(db):
    """The backstop alone (no progress handler) stops a long query."""
    from dspy_hero.execution.sqlite import Watchdog

    watchdog = Watchdog()
    conn = sqlite3.connect(db)
    token = watchdog.watch(conn, time.monotonic() + 0.2)
    start = time.monotonic()
    try:
        with pytest.raises(sqlite3.OperationalError, match="interrupt"):
            conn.execute(
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c"
            ).fetchall()
    finally:
        watchdog.unwatch(token)
        conn.close()
    assert time.monotonic() - start < 3.0


def test_read_pragmas_allowed(db):
    r = SQLiteExecutor(db).run("SELECT name FROM pragma_table_info('person') ORDER BY cid")
    assert r.ok and [x[0] for x in r.rows] == ["id", "name", "age", "city"]
    assert SQLiteExecutor(db).run("PRAGMA table_info(person)").ok


def test_invalid_utf8_text_is_decoded_with_replacement(tmp_path):
    path = tmp_path / "latin.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE t (s TEXT)")
    conn.execute("INSERT INTO t VALUES (CAST(X'43616665e9' AS TEXT))")  # 'Caf' + latin-1 e-acute
    conn.commit()
    conn.close()
    r = SQLiteExecutor(path).run("SELECT s FROM t")
    assert r.ok and r.rows[0][0].startswith("Caf") and "\ufffd" in r.rows[0][0]


def test_path_with_spaces_and_uri_characters(tmp_path):
    folder = tmp_path / "a dir ? # %"
    folder.mkdir()
    db = make_db(folder / "odd name.sqlite", rows=3)
    r = SQLiteExecutor(db).run("SELECT count(*) FROM person")
    assert r.ok and r.rows == ((3,),)


def test_session_reuses_one_guarded_connection(db):
    ex = SQLiteExecutor(db)
    with ex.session() as s:
        assert s.run("SELECT count(*) FROM person").rows == ((100,),)
        assert s.run("DELETE FROM person").error_type == REJECTED
        assert s.run("SELECT count(*) FROM person").rows == ((100,),)


def test_thread_safety(db):
    ex = SQLiteExecutor(db, timeout_s=10)
    queries = [(f"SELECT name FROM person WHERE id = {i}", ((f"name{i}",),)) for i in range(100)]
    queries += [("SELECT 1; SELECT 2", None), ("DROP TABLE person", None)] * 10

    def go(item):
        sql, expected = item
        r = ex.run(sql)
        return (r.ok and r.rows == expected) if expected is not None else (r.error_type == REJECTED)

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(go, queries * 3))
    assert ex.run("SELECT count(*) FROM person").rows == ((100,),)


def test_no_threads_leak(db):
    ex = SQLiteExecutor(db)
    before = threading.active_count()
    for _ in range(200):
        ex.run("SELECT 1")
    assert threading.active_count() <= before + 1  # at most the shared watchdog
