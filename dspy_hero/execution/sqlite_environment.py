"""The SQLite test-time environment: execute candidates and answer probes, with no gold anywhere.

HERO-T uses three probes to ground a refinement in the actual database rather than in the model's
guess of it: the schema (tables, columns, types, keys), a column's sample values (spelling and format
of literals such as 'F' vs 'female'), and running a sub-query to test a piece of the candidate.
"""

from __future__ import annotations

import os
import re
import sqlite3

from dspy_hero.execution.base import Execution, ProbeResult
from dspy_hero.execution.sqlite import SQLiteExecutor, read_only_uri
from dspy_hero.text import extract_code

__all__ = ["SQLiteEnvironment", "quote_identifier", "schema_text"]

_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# SQLite's keywords (sqlite.org/lang_keywords.html): a table named ORDER must be quoted.
SQLITE_KEYWORDS = frozenset(
    [
        "ABORT",
        "ACTION",
        "ADD",
        "AFTER",
        "ALL",
        "ALTER",
        "ALWAYS",
        "ANALYZE",
        "AND",
        "AS",
        "ASC",
        "ATTACH",
        "AUTOINCREMENT",
        "BEFORE",
        "BEGIN",
        "BETWEEN",
        "BY",
        "CASCADE",
        "CASE",
        "CAST",
        "CHECK",
        "COLLATE",
        "COLUMN",
        "COMMIT",
        "CONFLICT",
        "CONSTRAINT",
        "CREATE",
        "CROSS",
        "CURRENT",
        "CURRENT_DATE",
        "CURRENT_TIME",
        "CURRENT_TIMESTAMP",
        "DATABASE",
        "DEFAULT",
        "DEFERRABLE",
        "DEFERRED",
        "DELETE",
        "DESC",
        "DETACH",
        "DISTINCT",
        "DO",
        "DROP",
        "EACH",
        "ELSE",
        "END",
        "ESCAPE",
        "EXCEPT",
        "EXCLUDE",
        "EXCLUSIVE",
        "EXISTS",
        "EXPLAIN",
        "FAIL",
        "FILTER",
        "FIRST",
        "FOLLOWING",
        "FOR",
        "FOREIGN",
        "FROM",
        "FULL",
        "GENERATED",
        "GLOB",
        "GROUP",
        "GROUPS",
        "HAVING",
        "IF",
        "IGNORE",
        "IMMEDIATE",
        "IN",
        "INDEX",
        "INDEXED",
        "INITIALLY",
        "INNER",
        "INSERT",
        "INSTEAD",
        "INTERSECT",
        "INTO",
        "IS",
        "ISNULL",
        "JOIN",
        "KEY",
        "LAST",
        "LEFT",
        "LIKE",
        "LIMIT",
        "MATCH",
        "MATERIALIZED",
        "NATURAL",
        "NO",
        "NOT",
        "NOTHING",
        "NOTNULL",
        "NULL",
        "NULLS",
        "OF",
        "OFFSET",
        "ON",
        "OR",
        "ORDER",
        "OTHERS",
        "OUTER",
        "OVER",
        "PARTITION",
        "PLAN",
        "PRAGMA",
        "PRECEDING",
        "PRIMARY",
        "QUERY",
        "RAISE",
        "RANGE",
        "RECURSIVE",
        "REFERENCES",
        "REGEXP",
        "REINDEX",
        "RELEASE",
        "RENAME",
        "REPLACE",
        "RESTRICT",
        "RETURNING",
        "RIGHT",
        "ROLLBACK",
        "ROW",
        "ROWS",
        "SAVEPOINT",
        "SELECT",
        "SET",
        "TABLE",
        "TEMP",
        "TEMPORARY",
        "THEN",
        "TIES",
        "TO",
        "TRANSACTION",
        "TRIGGER",
        "UNBOUNDED",
        "UNION",
        "UNIQUE",
        "UPDATE",
        "USING",
        "VACUUM",
        "VALUES",
        "VIEW",
        "VIRTUAL",
        "WHEN",
        "WHERE",
        "WINDOW",
        "WITH",
        "WITHOUT",
    ]
)


def quote_identifier(name: str) -> str:
    """`name` as a safe SQL identifier: bare when it is a plain non-keyword word, else double-quoted."""
    if _PLAIN_NAME.fullmatch(name) and name.upper() not in SQLITE_KEYWORDS:
        return name
    return '"' + name.replace('"', '""') + '"'


def _always_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _connect(db_path: str | os.PathLike) -> sqlite3.Connection:
    if not os.path.isfile(db_path):
        raise FileNotFoundError(f"database file not found: {db_path}")
    conn = sqlite3.connect(read_only_uri(db_path), uri=True)
    conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
    return conn


def _tables(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
    ).fetchall()
    return [r[0] for r in rows]


def _table_ddl(conn: sqlite3.Connection, table: str) -> str:
    columns = conn.execute(f"PRAGMA table_info({_always_quote(table)})").fetchall()
    keys = sorted((c for c in columns if c[5]), key=lambda c: c[5])
    parts = [f"{quote_identifier(c[1])} {c[2]}".rstrip() for c in columns]
    if keys:
        parts.append("PRIMARY KEY (" + ", ".join(quote_identifier(c[1]) for c in keys) + ")")
    for fk in conn.execute(f"PRAGMA foreign_key_list({_always_quote(table)})").fetchall():
        # (id, seq, table, from, to, on_update, on_delete, match); `to` is None for the implicit primary key
        target = quote_identifier(fk[2]) + (f"({quote_identifier(fk[4])})" if fk[4] else "")
        parts.append(f"FOREIGN KEY ({quote_identifier(fk[3])}) REFERENCES {target}")
    return f"CREATE TABLE {quote_identifier(table)} (" + ", ".join(parts) + ");"


def schema_text(db_path: str | os.PathLike, tables: list[str] | None = None) -> str:
    """The database schema as compact DDL, one ``CREATE TABLE`` line per table (views follow).

    Rebuilt from the catalog rather than copied from ``sqlite_master.sql``, so every database reads
    the same way (columns with declared types, primary key, foreign keys) and whitespace, comments and
    constraint noise of the original DDL do not cost prompt tokens. Suitable for the ``db_schema``
    field of SQL examples. Raises FileNotFoundError for a missing file.
    """
    conn = _connect(db_path)
    try:
        names = _tables(conn)
        if tables is not None:
            wanted = {t.lower() for t in tables}
            names = [n for n in names if n.lower() in wanted]
        lines = [_table_ddl(conn, n) for n in names]
        if tables is None:
            views = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'view' AND sql IS NOT NULL"
            ).fetchall()
            lines += [" ".join(v[0].split()) + ";" for v in views]
        return "\n".join(lines)
    finally:
        conn.close()


class SQLiteEnvironment:
    """One SQLite database as HERO-T's environment (language ``"sql"``).

    All candidate programs and ``run_subquery`` probes go through `SQLiteExecutor`, so probes are as
    read-only and time-limited as candidates. Safe to use from several threads.
    """

    language = "sql"

    def __init__(self, db_path: str | os.PathLike, timeout_s: float = 30.0, max_rows: int = 100_000):
        self.db_path = str(db_path)
        self.executor = SQLiteExecutor(db_path, timeout_s=timeout_s, max_rows=max_rows)
        self._schema: str | None = None

    def __repr__(self) -> str:
        return f"SQLiteEnvironment({self.db_path!r})"

    def execute(self, program: str) -> Execution:
        return self.executor.run(extract_code(program, "sql"))

    def probes(self) -> dict[str, str]:
        return {
            "schema": "no argument (or a table name): tables, columns with types, primary and foreign keys",
            "sample_values": "'table.column': a few distinct non-null values of that column, as stored",
            "run_subquery": "an SQL SELECT: runs it read-only and describes the result",
        }

    def probe(self, name: str, argument: str = "") -> ProbeResult:
        argument = (argument or "").strip()
        handler = {
            "schema": self._probe_schema,
            "sample_values": self._probe_sample_values,
            "run_subquery": self._probe_run_subquery,
        }.get(name)
        if handler is None:
            return ProbeResult(
                name, argument, f"unknown probe {name!r}; available: {sorted(self.probes())}", ok=False
            )
        try:
            return handler(argument)
        except (FileNotFoundError, sqlite3.Error) as exc:
            return ProbeResult(name, argument, f"{type(exc).__name__}: {exc}", ok=False)

    def check(self, program: str, execution: Execution) -> tuple[bool, str]:
        """Gate a candidate: it ran, its result is complete, and it returned at least one column."""
        if not execution.ok:
            return False, f"execution failed: {execution.describe()}"
        if execution.truncated:
            return False, f"the result exceeded the {self.executor.max_rows}-row cap (truncated)"
        if execution.column_count == 0:
            return False, "the statement returned no columns (not a query)"
        return True, "executed without error"

    # --- probes ---------------------------------------------------------------------------------------

    def schema(self) -> str:
        if self._schema is None:
            self._schema = schema_text(self.db_path)
        return self._schema

    def _probe_schema(self, argument: str) -> ProbeResult:
        if not argument:
            return ProbeResult("schema", argument, self.schema() or "(the database has no tables)")
        table = self._resolve_table(argument.strip('`"[] '))
        if table is None:
            return ProbeResult(
                "schema", argument, f"no table named {argument!r}; tables: {self._table_names()}", ok=False
            )
        return ProbeResult("schema", argument, schema_text(self.db_path, [table]))

    def _probe_sample_values(self, argument: str, limit: int = 8) -> ProbeResult:
        found = self._resolve_column(argument)
        if isinstance(found, str):
            return ProbeResult("sample_values", argument, found, ok=False)
        table, column = found
        col, tab = _always_quote(column), _always_quote(table)
        sql = f"SELECT DISTINCT {col} FROM {tab} WHERE {col} IS NOT NULL LIMIT {int(limit)}"
        result = self.executor.run(sql)
        if not result.ok:
            return ProbeResult("sample_values", argument, result.describe(), ok=False)
        values = [_show(r[0]) for r in result.rows or ()]
        if not values:
            return ProbeResult("sample_values", argument, f"{table}.{column} holds no non-null values")
        return ProbeResult("sample_values", argument, f"{table}.{column} sample values: " + ", ".join(values))

    def _probe_run_subquery(self, argument: str) -> ProbeResult:
        result = self.execute(argument)
        return ProbeResult("run_subquery", argument, result.describe(max_rows=5, max_chars=800), ok=result.ok)

    # --- name resolution (case-insensitive, tolerant of quoting) ----------------------------------------

    def _table_names(self) -> list[str]:
        conn = _connect(self.db_path)
        try:
            return _tables(conn)
        finally:
            conn.close()

    def _resolve_table(self, name: str) -> str | None:
        names = self._table_names()
        return next((t for t in names if t.lower() == name.lower()), None)

    def _resolve_column(self, argument: str) -> tuple[str, str] | str:
        """(table, column) for a 'table.column' argument, or an explanation of what is wrong."""
        names = self._table_names()
        text = argument.strip()
        for table in sorted(names, key=len, reverse=True):  # longest first: table names may hold dots
            for quoted in (table, f'"{table}"', f"`{table}`", f"[{table}]"):
                if text.lower().startswith(quoted.lower() + "."):
                    column = text[len(quoted) + 1 :].strip().strip('`"[]')
                    conn = _connect(self.db_path)
                    try:
                        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({_always_quote(table)})")]
                    finally:
                        conn.close()
                    match = next((c for c in cols if c.lower() == column.lower()), None)
                    if match is None:
                        return f"table {table!r} has no column {column!r}; its columns: {cols}"
                    return table, match
        return f"expected 'table.column' with an existing table; tables: {names}"


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
