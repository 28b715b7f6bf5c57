"""Hostile SQL through SQLiteExecutor: every attack is stopped with a clear Execution error, the
database file's bytes stay identical, and no file appears next to it (issue 7)."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time

import pytest

from dspy_hero.execution.base import REJECTED, RESOURCE, SYNTAX, TIMEOUT
from dspy_hero.execution.sqlite import SQLiteExecutor

logger = logging.getLogger(__name__)

CAP = 1000
SHORT_TIMEOUT_S = 0.5

# (name, category, sql, accepted error types). An attack is stopped when the run fails with one of
# the accepted types (or, for result-size attacks, is cut at the row cap) and the file is unchanged.
ATTACKS = [
    ("drop table", "DROP", "DROP TABLE account", {REJECTED}),
    ("drop index", "DROP", "DROP INDEX account_owner", {REJECTED}),
    ("drop view", "DROP", "DROP VIEW rich", {REJECTED}),
    ("delete all", "DELETE", "DELETE FROM account", {REJECTED}),
    (
        "delete via CTE",
        "DELETE",
        "WITH x AS (SELECT 1) DELETE FROM account WHERE id IN (SELECT * FROM x)",
        {REJECTED},
    ),
    ("insert", "INSERT", "INSERT INTO account VALUES (99, 'mallory', 1e9)", {REJECTED}),
    (
        "insert select",
        "INSERT",
        "INSERT INTO account SELECT id + 100, owner, balance FROM account",
        {REJECTED},
    ),
    ("replace", "INSERT", "REPLACE INTO account VALUES (1, 'mallory', 0)", {REJECTED}),
    (
        "upsert",
        "INSERT",
        "INSERT INTO account VALUES (1, 'x', 0) ON CONFLICT(id) DO UPDATE SET balance = 0",
        {REJECTED},
    ),
    ("update", "UPDATE", "UPDATE account SET balance = 0", {REJECTED}),
    ("update schema table", "UPDATE", "UPDATE sqlite_master SET sql = 'CREATE TABLE x(y)'", {REJECTED}),
    ("create table", "CREATE", "CREATE TABLE evil (x)", {REJECTED}),
    ("create table as", "CREATE", "CREATE TABLE evil AS SELECT * FROM account", {REJECTED}),
    ("create temp table", "CREATE", "CREATE TEMP TABLE evil (x)", {REJECTED}),
    ("create index", "CREATE", "CREATE INDEX evil ON account(balance)", {REJECTED}),
    (
        "create trigger",
        "CREATE",
        "CREATE TRIGGER evil AFTER INSERT ON account BEGIN DELETE FROM account; END",
        {REJECTED},
    ),
    ("create view", "CREATE", "CREATE VIEW evil AS SELECT 1", {REJECTED}),
    ("create virtual table", "CREATE", "CREATE VIRTUAL TABLE evil USING fts5(x)", {REJECTED}),
    ("alter table", "CREATE", "ALTER TABLE account ADD COLUMN pwned INTEGER", {REJECTED}),
    ("attach new file", "ATTACH", "ATTACH DATABASE '{dir}/attached.sqlite' AS evil", {REJECTED}),
    ("attach memory", "ATTACH", "ATTACH DATABASE ':memory:' AS evil", {REJECTED}),
    ("detach main", "ATTACH", "DETACH DATABASE main", {REJECTED}),
    ("vacuum into", "VACUUM INTO", "VACUUM INTO '{dir}/copy.sqlite'", {REJECTED}),
    ("vacuum", "VACUUM INTO", "VACUUM", {REJECTED}),
    ("pragma user_version", "PRAGMA", "PRAGMA user_version = 5", {REJECTED}),
    ("pragma journal_mode", "PRAGMA", "PRAGMA journal_mode = WAL", {REJECTED}),
    ("pragma journal_mode delete", "PRAGMA", "PRAGMA journal_mode = DELETE", {REJECTED}),
    ("pragma writable_schema", "PRAGMA", "PRAGMA writable_schema = ON", {REJECTED}),
    ("pragma query_only off", "PRAGMA", "PRAGMA query_only = 0", {REJECTED}),
    ("pragma wal_checkpoint", "PRAGMA", "PRAGMA wal_checkpoint(TRUNCATE)", {REJECTED}),
    ("pragma function write", "PRAGMA", "SELECT * FROM pragma_user_version", {REJECTED}),
    ("analyze", "PRAGMA", "ANALYZE", {REJECTED}),
    ("reindex", "PRAGMA", "REINDEX account_owner", {REJECTED}),
    ("load_extension", "load_extension", "SELECT load_extension('/tmp/evil.so')", {REJECTED}),
    (
        "load_extension with entry",
        "load_extension",
        "SELECT load_extension('libc.so.6', 'system')",
        {REJECTED},
    ),
    ("writefile", "load_extension", "SELECT writefile('{dir}/pwned.txt', 'x')", {REJECTED, SYNTAX}),
    ("fts3_tokenizer", "load_extension", "SELECT fts3_tokenizer('simple')", {REJECTED, SYNTAX}),
    ("begin", "transactions", "BEGIN IMMEDIATE", {REJECTED}),
    ("savepoint", "transactions", "SAVEPOINT s", {REJECTED}),
    ("select then drop", "multiple statements", "SELECT 1; DROP TABLE account", {REJECTED}),
    (
        "select then insert",
        "multiple statements",
        "SELECT * FROM account;\nINSERT INTO account VALUES (7, 'x', 1)",
        {REJECTED},
    ),
    ("comment hides second", "multiple statements", "SELECT 1 /* ; */; DELETE FROM account -- ;", {REJECTED}),
    ("string hides second", "multiple statements", "SELECT ';'; UPDATE account SET balance = 0", {REJECTED}),
    (
        "runaway recursive CTE",
        "timeout",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        {TIMEOUT},
    ),
    (
        "huge cross join",
        "timeout",
        "SELECT count(*) FROM account a, account b, account c, account d, account e, account f, account g, account h, account i, account j, account k, account l",
        {TIMEOUT},
    ),
    (
        "huge sort",
        "timeout",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY random() LIMIT 1",
        {TIMEOUT},
    ),
    ("giant blob", "resources", "SELECT length(zeroblob(2000000000))", {RESOURCE}),
    (
        "giant string by doubling",
        "resources",
        "WITH RECURSIVE s(x) AS (SELECT 'xx' UNION ALL SELECT x || x FROM s) SELECT length(x) FROM s",
        {RESOURCE, TIMEOUT},
    ),
    (
        "giant string by replace",
        "resources",
        "SELECT length(replace(hex(zeroblob(100000000)), '0', 'aaaa'))",
        {RESOURCE},
    ),
    (  # each value is small, but together they would fill the host's memory (here: 320 MB)
        "huge values across rows",
        "resources",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 320) SELECT zeroblob(1000000) FROM c",
        {RESOURCE},
    ),
    (
        "millions of rows",
        "row cap",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 5000000) SELECT x FROM c",
        "truncated",
    ),
    (
        "cross join rows",
        "row cap",
        "SELECT * FROM account a, account b, account c, account d, account e, account f",
        "truncated",
    ),
]
REQUIRED_CATEGORIES = {
    "DROP",
    "DELETE",
    "INSERT",
    "UPDATE",
    "CREATE",
    "ATTACH",
    "VACUUM INTO",
    "PRAGMA",
    "load_extension",
    "multiple statements",
    "timeout",
    "row cap",
}


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def bank(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bank")
    path = folder / "bank.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE account (id INTEGER PRIMARY KEY, owner TEXT, balance REAL)")
    conn.executemany("INSERT INTO account VALUES (?, ?, ?)", [(i, f"owner{i}", 100.0 * i) for i in range(12)])
    conn.execute("CREATE INDEX account_owner ON account(owner)")
    conn.execute("CREATE VIEW rich AS SELECT * FROM account WHERE balance > 500")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    return path


def run_attack(bank, sql):
    folder = bank.parent
    before_hash, before_files = sha256(bank), sorted(p.name for p in folder.iterdir())
    executor = SQLiteExecutor(bank, timeout_s=SHORT_TIMEOUT_S, max_rows=CAP)
    start = time.monotonic()
    result = executor.run(sql.replace("{dir}", str(folder)))
    elapsed = time.monotonic() - start
    unchanged = sha256(bank) == before_hash and sorted(p.name for p in folder.iterdir()) == before_files
    return result, elapsed, unchanged


def stopped(result, expected) -> bool:
    if expected == "truncated":
        return result.ok and result.truncated and result.row_count == CAP
    return (not result.ok) and result.error_type in expected and bool(result.error_message)


@pytest.mark.parametrize("name,category,sql,expected", ATTACKS, ids=[a[0] for a in ATTACKS])
def test_attack_is_stopped(bank, name, category, sql, expected):
    result, elapsed, unchanged = run_attack(bank, sql)
    assert stopped(result, expected), f"{name}: {result}"
    assert unchanged, f"{name}: the database file or its folder changed"
    assert elapsed < SHORT_TIMEOUT_S + 5.0, f"{name} took {elapsed:.1f}s"


def test_all_attacks_counted_and_stopped(bank):
    """The summary issue 7 asks for: how many attacks were tried and how many were stopped."""
    categories = {a[1] for a in ATTACKS}
    assert REQUIRED_CATEGORIES <= categories, REQUIRED_CATEGORIES - categories
    fast = [a for a in ATTACKS if a[1] not in ("timeout", "resources")]
    results = [(a[0], *run_attack(bank, a[2]), a[3]) for a in fast]
    stopped_count = sum(1 for name, r, _, unchanged, exp in results if stopped(r, exp) and unchanged)
    logger.info(
        "SQL attacks: %d tried, %d stopped (plus %d timeouts tested separately)",
        len(results),
        stopped_count,
        len(ATTACKS) - len(fast),
    )
    assert stopped_count == len(results) and len(ATTACKS) >= 40


def test_database_still_readable_after_attacks(bank):
    r = SQLiteExecutor(bank).run("SELECT count(*), sum(balance) FROM account")
    assert r.ok and r.rows == ((12, 6600.0),)
    conn = sqlite3.connect(f"file:{bank}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        conn.close()
