"""Read-only execution of one SQL query against a SQLite database file.

Generated SQL is untrusted, so four independent guards stand between it and the data:

1. the connection is opened read-only through a URI (``file:...?mode=ro``), so page writes fail;
2. an authorizer allows only reading actions (SELECT, column reads, recursive CTEs, ordinary
   functions, a few introspection pragmas) and denies everything else, including ATTACH and
   ``VACUUM INTO``, which write *other* files even on a read-only connection;
3. ``SQLITE_LIMIT_ATTACHED`` is 0, so no second database can be attached at all;
4. only one statement runs (Python's sqlite3 refuses a second; trailing semicolons and comments pass).

A wall-clock timeout stops runaway queries twice over: a progress handler checks the deadline every
few thousand VM instructions, and a shared watchdog thread calls ``interrupt()`` when the deadline
passes, for the rare long step that runs no VM instructions (a huge sort, a slow C function). Results
are capped at `max_rows` rows (``truncated=True`` beyond), no string or blob may exceed
256 MiB (``SQLITE_LIMIT_LENGTH``), and a result holding more than 256 MiB of text and blobs in all
is stopped as a resource error (the rows live in the host's memory). Each `run` opens its own connection, so one executor can serve many
threads.

Known limit of in-process execution: a single built-in C function call cannot be interrupted. The
worst we know is ``printf('%.*c', 2000000000, 'x')``, which loops ~12 s before SQLite gives up (its
memory stays bounded by the length limit); the timeout then fires at the next VM instruction.
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Self

from dspy_hero.execution.base import (
    EMPTY_PROGRAM,
    ENVIRONMENT,
    REJECTED,
    RESOURCE,
    RUNTIME,
    SYNTAX,
    TIMEOUT,
    Execution,
    failed,
)

__all__ = ["SQLiteExecutor", "SQLiteSession", "read_only_uri", "split_single_statement"]

# Introspection pragmas that only read, whatever their argument (``pragma_table_info('t')`` etc.).
READ_PRAGMAS = frozenset(
    {
        "table_info",
        "table_xinfo",
        "table_list",
        "index_list",
        "index_info",
        "index_xinfo",
        "foreign_key_list",
        "collation_list",
        "function_list",
        "pragma_list",
    }
)
# Functions that touch files or the engine's internals.
DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zipfile", "sqlar_uncompress"}
)
_ACTIONS = [
    "CREATE_INDEX",
    "CREATE_TABLE",
    "CREATE_TEMP_INDEX",
    "CREATE_TEMP_TABLE",
    "CREATE_TEMP_TRIGGER",
    "CREATE_TEMP_VIEW",
    "CREATE_TRIGGER",
    "CREATE_VIEW",
    "DELETE",
    "DROP_INDEX",
    "DROP_TABLE",
    "DROP_TEMP_INDEX",
    "DROP_TEMP_TABLE",
    "DROP_TEMP_TRIGGER",
    "DROP_TEMP_VIEW",
    "DROP_TRIGGER",
    "DROP_VIEW",
    "INSERT",
    "PRAGMA",
    "READ",
    "SELECT",
    "TRANSACTION",
    "UPDATE",
    "ATTACH",
    "DETACH",
    "ALTER_TABLE",
    "REINDEX",
    "ANALYZE",
    "CREATE_VTABLE",
    "DROP_VTABLE",
    "FUNCTION",
    "SAVEPOINT",
    "RECURSIVE",
]
_ACTION_NAMES = {getattr(sqlite3, "SQLITE_" + a): a for a in _ACTIONS if hasattr(sqlite3, "SQLITE_" + a)}

_SCHEMA_TABLES = frozenset({"sqlite_master", "sqlite_schema", "sqlite_temp_master"})
_READ_ACTIONS = frozenset({sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE})
_PROGRESS_OPS = 4000  # VM instructions between deadline checks (~tens of microseconds)
_MAX_VALUE_BYTES = 256 * 1024 * 1024  # largest string/blob a query may build (SQLITE_LIMIT_LENGTH)
# Text and blob bytes one result may hold in this process: the row cap alone would let 100,000 rows
# of 256 MiB values through, and the rows are fetched into the host's memory.
_MAX_RESULT_BYTES = 256 * 1024 * 1024

_SYNTAX_PATTERNS = (
    "syntax error",
    "incomplete input",
    "unrecognized token",
    "no such table",
    "no such column",
    "no such function",
    "ambiguous column name",
    "wrong number of arguments",
    "misuse of aggregate",
    "misuse of window function",
    "do not have the same number of result columns",
    "term out of range",
    "is not a function",
    "no tables specified",
    "circular reference",
    "row value misused",
)


def read_only_uri(db_path: str | os.PathLike) -> str:
    """The SQLite URI that opens `db_path` read-only (percent-encoded, absolute)."""
    return Path(db_path).resolve().as_uri() + "?mode=ro"


_TRAILING_JUNK = re.compile(r"(?:\s|;|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.DOTALL)


def split_single_statement(sql: str) -> tuple[str, str]:
    """Split `sql` into its first complete statement and the rest.

    Used only when sqlite3 reports more than one statement, to tell "SELECT 1;;" or a trailing
    comment (accepted) from a real second statement (rejected).
    """
    for match in re.finditer(";", sql):
        head = sql[: match.end()]
        if sqlite3.complete_statement(head):
            return head, sql[match.end() :]
    return sql, ""


def _is_junk(text: str) -> bool:
    return _TRAILING_JUNK.fullmatch(text) is not None


def _is_empty(sql: str) -> bool:
    head = sql.lstrip()[:1]
    if head.isalnum() or head == "(":
        return False  # the common case, without the regex
    return _is_junk(sql)


class _Watchdog:
    """One daemon thread interrupting connections whose deadline has passed.

    Shared by all executors so that a query costs two dict operations, not a thread start. While
    queries are in flight the thread polls every `POLL_S` (it is a backstop: the progress handler
    is the precise timeout); with nothing to watch it sleeps, and after a minute idle it exits
    (restarted on demand). Registration takes no lock: dict operations are atomic in CPython, and
    the thread announces that it is going to sleep *before* its last look, so a query registered
    meanwhile either is seen by that look or sees the "sleeping" state and wakes the thread.
    """

    POLL_S = 0.05
    IDLE_EXIT_S = 60.0

    def __init__(self) -> None:
        self._live: dict[int, tuple[float, sqlite3.Connection]] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._state = "stopped"  # "stopped" | "sleeping" | "polling"

    def watch(self, conn: sqlite3.Connection, deadline: float) -> int:
        token = next(self._ids)
        self._live[token] = (deadline, conn)
        if self._state != "polling":
            self._wake()
        return token

    def unwatch(self, token: int) -> None:
        self._live.pop(token, None)

    def _wake(self) -> None:
        with self._cond:
            if self._state == "stopped":
                self._state = "polling"
                threading.Thread(target=self._loop, name="dspy-hero-sqlite-watchdog", daemon=True).start()
            elif self._state == "sleeping":
                self._state = "polling"
                self._cond.notify()

    def _loop(self) -> None:
        while True:
            if not self._live:
                with self._cond:
                    self._state = "sleeping"
                    if not self._live:  # the last look, after announcing sleep
                        self._cond.wait(self.IDLE_EXIT_S)
                        if self._state == "sleeping" and not self._live:
                            self._state = "stopped"
                            return
                    self._state = "polling"
                continue
            now = time.monotonic()
            for token, (deadline, conn) in list(self._live.items()):
                # whoever pops the token first owns it: the query's own unwatch, or this interrupt
                if deadline <= now and self._live.pop(token, None) is not None:
                    try:
                        conn.interrupt()
                    except sqlite3.ProgrammingError:  # closed in the meantime: nothing to stop
                        pass
            time.sleep(self.POLL_S)


_WATCHDOG = _Watchdog()


def _reset_watchdog_in_child() -> None:
    global _WATCHDOG
    _WATCHDOG = _Watchdog()  # a forked child has no watchdog thread, whatever the parent had


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_watchdog_in_child)


def _classify(message: str) -> str:
    low = message.lower()
    if (
        "not authorized" in low
        or "readonly database" in low
        or "read-only" in low
        or "may not be modified" in low
    ):
        return REJECTED
    if any(p in low for p in _SYNTAX_PATTERNS):
        return SYNTAX
    if "too big" in low or "out of memory" in low:
        return RESOURCE
    if "not a database" in low or "unable to open" in low or "disk i/o" in low or "malformed" in low:
        return ENVIRONMENT
    return RUNTIME


class SQLiteSession:
    """One guarded read-only connection that runs several queries in turn (one thread at a time).

    `SQLiteExecutor.run` uses a session per call; timing code (VES) keeps one open so that repeated
    runs measure the query rather than opening the file. Every guard applies to every query.
    """

    def __init__(self, executor: SQLiteExecutor, lossy_text: bool = False):
        self.executor = executor
        self._deadline = 0.0
        self._timed_out = False
        self._denied: list[str] = []
        self.conn = sqlite3.connect(
            executor._uri, uri=True, timeout=executor.timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
            self.conn.set_authorizer(self._authorize)
            self.conn.set_progress_handler(self._progress, _PROGRESS_OPS)
            if lossy_text:
                self.conn.text_factory = lambda b: b.decode("utf-8", errors="replace")
        except BaseException:
            self.conn.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    def _authorize(self, action, arg1, arg2, db_name, trigger):
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in DENIED_FUNCTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_UPDATE and arg1 in _SCHEMA_TABLES and trigger is None:
            # SQLite's own schema load, seen when a pragma function is first used on a connection.
            # A real UPDATE of the schema table still fails: writable_schema is denied and the file is read-only.
            return sqlite3.SQLITE_OK
        what = _ACTION_NAMES.get(action, str(action))
        detail = arg2 if action == sqlite3.SQLITE_FUNCTION else arg1
        self._denied.append(f"{what} {detail}" if detail else what)
        return sqlite3.SQLITE_DENY

    def _progress(self):
        if time.monotonic() > self._deadline:
            self._timed_out = True
            return 1
        return 0

    def run(self, sql: str) -> Execution:
        """Execute one query on this connection; never raises for anything the query does."""
        ex = self.executor
        start = time.perf_counter()
        self._deadline = deadline = time.monotonic() + ex.timeout_s
        self._timed_out = False
        self._denied = []
        conn = self.conn
        token = _WATCHDOG.watch(conn, deadline)
        try:
            try:
                cur = conn.execute(sql)
            except sqlite3.ProgrammingError as exc:
                if "one statement" not in str(exc):
                    raise
                head, rest = split_single_statement(sql)
                if not _is_junk(rest):
                    return failed(
                        REJECTED,
                        "only one SQL statement may run; the program contains more than one",
                        time.perf_counter() - start,
                    )
                cur = conn.execute(head)
            description = cur.description
            if description is None:
                return Execution(ok=True, rows=(), columns=(), runtime_s=time.perf_counter() - start)
            cap = ex.max_rows
            rows, size = [], 0
            for row in itertools.islice(cur, cap + 1):
                rows.append(row)
                for value in row:
                    if value.__class__ is str or value.__class__ is bytes:
                        size += len(value)
                if size > _MAX_RESULT_BYTES:  # checked per row: the next row may be another 256 MiB
                    return failed(
                        RESOURCE,
                        f"the result passed {_MAX_RESULT_BYTES >> 20} MiB of text and blobs after "
                        f"{len(rows)} row(s); it was stopped",
                        time.perf_counter() - start,
                    )
            truncated = len(rows) > cap
            if truncated:
                del rows[cap:]
            return Execution(
                ok=True,
                rows=tuple(rows),
                columns=tuple([d[0] for d in description]),
                runtime_s=time.perf_counter() - start,
                truncated=truncated,
            )
        except sqlite3.Error as exc:
            elapsed = time.perf_counter() - start
            message = str(exc)
            if self._timed_out or (time.monotonic() > deadline and "interrupt" in message.lower()):
                return failed(TIMEOUT, f"query exceeded the {ex.timeout_s:g} s timeout", elapsed)
            kind = _classify(message)
            if self._denied:
                kind = REJECTED
                message = f"{message}: read-only access forbids {', '.join(dict.fromkeys(self._denied[:3]))}"
            return failed(kind, message, elapsed)
        except (MemoryError, OverflowError) as exc:
            return failed(RESOURCE, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - e.g. a NUL character: the program's fault, reported as such
            return failed(RUNTIME, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        finally:
            _WATCHDOG.unwatch(token)


class SQLiteExecutor:
    """Runs single read-only SQL queries on one SQLite file; safe to share between threads.

    A missing database file is reported per run as an ``EnvironmentError`` Execution rather than
    raised at construction: an executor may be built before its database is materialized, and
    callers that want to fail fast (metrics, the optimizer's input checks) test `exists()`.
    """

    def __init__(self, db_path: str | os.PathLike, timeout_s: float = 30.0, max_rows: int = 100_000):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if max_rows < 0:
            raise ValueError(f"max_rows must be >= 0, got {max_rows!r}")
        self.db_path = str(db_path)
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self._uri = read_only_uri(db_path)

    def exists(self) -> bool:
        return os.path.isfile(self.db_path)

    def __repr__(self) -> str:
        return f"SQLiteExecutor({self.db_path!r}, timeout_s={self.timeout_s}, max_rows={self.max_rows})"

    def session(self, lossy_text: bool = False) -> SQLiteSession:
        """A guarded connection for several sequential queries (use as a context manager).

        Raises FileNotFoundError for a missing database and sqlite3.Error if it cannot be opened.
        """
        if not self.exists():
            raise FileNotFoundError(f"database file not found: {self.db_path}")
        return SQLiteSession(self, lossy_text)

    def run(self, sql: str) -> Execution:
        """Execute one query on a fresh connection; never raises for anything the query does."""
        if not isinstance(sql, str) or _is_empty(sql):
            return failed(EMPTY_PROGRAM, "the program is empty")
        result = self._run(sql, lossy_text=False)
        if (
            not result.ok
            and result.error_type == RUNTIME
            and "could not decode" in (result.error_message or "").lower()
        ):
            result = self._run(sql, lossy_text=True)  # text that is not UTF-8: decode with replacement
        return result

    def _run(self, sql: str, lossy_text: bool) -> Execution:
        try:
            session = SQLiteSession(self, lossy_text)
        except sqlite3.Error as exc:
            # checked here, not before every run: a stat per query is measurable overhead
            if not self.exists():
                return failed(ENVIRONMENT, f"database file not found: {self.db_path}")
            return failed(ENVIRONMENT, f"cannot open database {self.db_path}: {exc}")
        try:
            return session.run(sql)
        finally:
            session.close()
