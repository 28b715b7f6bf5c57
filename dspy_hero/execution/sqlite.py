"""Read-only execution of one SQL query against a SQLite database file.

Generated SQL is untrusted, so four independent guards stand between it and the data:

1. the connection is opened read-only and immutable through a URI (``file:...?mode=ro&immutable=1``),
   so page writes fail and no ``-wal``/``-shm``/journal file is ever created beside the database
   (a database with a non-empty ``-wal`` is refused with a clear error: its changes would be missed);
2. an authorizer allows only reading actions (SELECT, column reads, recursive CTEs, ordinary
   functions, a few introspection pragmas) and denies everything else, including ATTACH and
   ``VACUUM INTO``, which write *other* files even on a read-only connection;
3. ``SQLITE_LIMIT_ATTACHED`` is 0, so no second database can be attached at all;
4. only one statement runs (Python's sqlite3 refuses a second; trailing semicolons and comments pass).

Time. A progress handler checks the deadline every few thousand VM instructions, and a `Watchdog`
thread calls ``interrupt()`` when it passes. Both act only at loop instructions, so three more
bounds cover what runs between them (issue 12, class E): the SQL functions whose *single call* is
long (``printf('%.*c', 2000000000, 'x')`` loops ~12 s; ``instr``/``replace``/``trim`` are quadratic)
are replaced, on queries that name them, by bounded versions that check the deadline, refuse
oversized widths and searches, and compute the rest with the built-in or a linear-time search
(`_BoundedFunctions`); every string or blob is at most 4 MiB (``SQLITE_LIMIT_LENGTH``), so one
linear call lasts milliseconds; and a query may hold at most ``timeout_s / 15 ms`` value-sized
operations (functions, ``||``, LIKE), so one row's uninterruptible expressions end within the
timeout again. Together: a query returns within twice its timeout.

Memory and disk. ``temp_store=MEMORY`` keeps temporary b-trees, sorters and CTE queues in SQLite's
heap instead of temporary files, and ``PRAGMA hard_heap_limit`` caps that heap (1 GiB by default;
process-wide, only ever lowered), so one row's values, a sort or a DISTINCT table fail with a
resource error instead of filling memory or the disk. Results are capped at `max_rows` rows
(``truncated=True`` beyond), and a result holding more than 256 MiB of text and blobs in all is
stopped (the rows live in the host's memory). Each `run` opens its own connection, so one executor
can serve many threads.

Cost: the heap limit is shared by every SQLite connection of the process, so a query that exhausts
it can make a concurrent one fail with a ResourceLimit too (its message says so). The smallest
``heap_limit_mb`` any executor of the process asked for wins (SQLite's pragma only lowers it).
"""

from __future__ import annotations

import itertools
import os
import re
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Self

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

__all__ = ["SQLiteExecutor", "SQLiteSession", "Watchdog", "read_only_uri", "split_single_statement"]

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
# Largest string/blob a query may read or build (SQLITE_LIMIT_LENGTH). It also bounds the time of
# one linear C call (hex, upper, quote, ||: ~1-7 ms at this size), which no timeout can interrupt.
# The largest value in the shared Spider/BIRD databases is 60 bytes.
_MAX_VALUE_BYTES = 4 * 1024 * 1024
# Text and blob bytes one result may hold in this process: the row cap alone would let 100,000 rows
# of 256 MiB values through, and the rows are fetched into the host's memory.
_MAX_RESULT_BYTES = 256 * 1024 * 1024
# SQLite's heap in this process (all connections: the limit is process-wide and only ever lowered).
# Values of one row, temporary tables, sorters and CTE queues all live there (temp_store=MEMORY),
# so no query holds more than this, and none spills to temporary files.
DEFAULT_HEAP_LIMIT_MB = 1024
_HEAP_NOTE = " (SQLite's heap is capped at {} MiB for the whole process, shared by concurrent queries)"

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
    """The SQLite URI that opens `db_path` read-only and immutable (percent-encoded, absolute).

    ``immutable=1`` tells SQLite the file cannot change, so it takes no locks and never creates the
    ``-wal``/``-shm`` files that a plain ``mode=ro`` open of a WAL database writes beside it. The
    price: changes still sitting in a write-ahead log would be invisible, so `SQLiteExecutor`
    refuses a database whose ``-wal`` file is not empty (see `pending_wal`).
    """
    return Path(db_path).resolve().as_uri() + "?mode=ro&immutable=1"


def pending_wal(db_path: str | os.PathLike) -> bool:
    """Whether `db_path` has a non-empty write-ahead log (changes an immutable open would miss)."""
    try:
        return os.path.getsize(f"{db_path}-wal") > 0
    except OSError:
        return False


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


class Watchdog:
    """One daemon thread interrupting connections whose deadline has passed.

    Share one between executors that are created per query (the metrics do), so that a query costs
    two dict operations, not a thread start. While queries are in flight the thread polls every
    `POLL_S` (it is a backstop: the progress handler is the precise timeout); with nothing to watch
    it sleeps, and after `IDLE_EXIT_S` idle it exits (restarted on demand), so forgotten watchdogs
    leave no thread behind. Registration takes no lock: dict operations are atomic in CPython, and
    the thread announces that it is going to sleep *before* its last look, so a query registered
    meanwhile either is seen by that look or sees the "sleeping" state and wakes the thread. A
    forked child starts from a clean state (the parent's thread does not exist there).
    """

    POLL_S = 0.05
    IDLE_EXIT_S = 1.0  # short: executors made per environment each own one, and idle threads must not pile up

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._live: dict[int, tuple[float, sqlite3.Connection]] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition(threading.Lock())
        self._state = "stopped"  # "stopped" | "sleeping" | "polling"

    def watch(self, conn: sqlite3.Connection, deadline: float) -> int:
        if self._pid != os.getpid():
            self._reset()
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


class _Refusal(Exception):
    """Raised inside a bounded SQL function; the session reads the reason it recorded."""


def _sqlite_int(value: Any, aux: sqlite3.Connection) -> int:
    """An argument as SQLite's C functions read it (``sqlite3_value_int64``), exactly."""
    if value.__class__ is int:
        return value
    if value is None:
        return 0
    return aux.execute("SELECT CAST(? AS INTEGER)", (value,)).fetchone()[0]


def _byte_size(value: Any) -> int:
    """An upper bound on the UTF-8 size of an argument once SQLite reads it as text."""
    if value.__class__ is str:
        return 4 * len(value)
    if value.__class__ is bytes:
        return len(value)
    return 32  # a number or NULL


# printf/format conversions: flags, width, precision, length, type (SQLite's printf grammar)
_PRINTF_SPEC = re.compile(r"%([-+ #0!,]*)(\*|[0-9]*)(?:\.(\*|[0-9]*))?(l{0,2})(.?)", re.DOTALL)
# Functions whose one call can run long or build a huge value before any deadline check. A query
# whose text names one of them gets the bounded versions (names match inside quotes and comments
# too, which only means a harmless registration; SQLite has no other way to reach a function).
# Straight-line code (one row's expressions) runs no instruction that checks the deadline, so its
# time is bounded only by the number of value-sized operations in it times their cost (~15 ms for
# upper() on a value at the length limit). A query may hold at most timeout_s / that many of them,
# so even a chain of them ends within twice the timeout. Counted on the raw text (string literals
# included: an overcount only matters for tiny timeouts).
_HEAVY_TERM_S = 0.015
_MIN_HEAVY_TERMS = 32
_HEAVY_TERM = re.compile(
    r"\b(?:hex|upper|lower|quote|length|octet_length|substr|substring|replace|instr|trim|ltrim|rtrim|printf|"
    r"format|zeroblob|randomblob|soundex|char|unicode|cast|like|glob|regexp|match|json\w*)\b|\|\|",
    re.IGNORECASE,
)
_BOUNDED_NAMES = ("printf", "format", "instr", "replace", "randomblob", "trim")  # "trim" covers ltrim/rtrim


class _BoundedFunctions:
    """Bounded replacements for the SQL functions whose single call the timeout cannot stop.

    The progress handler and ``interrupt()`` are only consulted between VM instructions, so one C
    call runs to its end: ``printf('%.*c', 2000000000, 'x')`` loops ~12 s even after the length
    limit stopped its output, and ``instr``/``replace`` compare naively (a 2 MB haystack and a 1 MB
    needle: ~30 s). Each replacement first checks the deadline (so a row of many calls stops at the
    timeout), then refuses arguments whose work exceeds the value limit, then computes the result
    with SQLite's own built-in on a private in-memory connection (exact semantics) or, for text,
    with Python's linear-time search (the same result). The extra cost is paid only by queries that
    name these functions.
    """

    # work (haystack bytes x needle bytes) the built-in search may do in one call (~10 ms)
    MAX_SEARCH_WORK = 200_000_000

    def __init__(self, session: SQLiteSession):
        self._session = session
        self._aux: sqlite3.Connection | None = None

    def install(self, conn: sqlite3.Connection) -> None:
        conn.create_function("printf", -1, self.printf)
        conn.create_function("format", -1, self.printf)
        conn.create_function("instr", 2, self.instr)
        conn.create_function("replace", 3, self.replace)
        conn.create_function("randomblob", 1, self.randomblob)
        for name, strip in (("trim", str.strip), ("ltrim", str.lstrip), ("rtrim", str.rstrip)):
            conn.create_function(name, 2, self._trimmer(name, strip))

    def close(self) -> None:
        if self._aux is not None:
            self._aux.close()

    def _builtin(self) -> sqlite3.Connection:
        if self._aux is None:
            aux = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            aux.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
            self._aux = aux
        return self._aux

    def _call(self, name: str, args: tuple) -> Any:
        marks = ",".join("?" * len(args))
        return self._builtin().execute(f"SELECT {name}({marks})", args).fetchone()[0]

    def _check_deadline(self) -> None:
        if time.monotonic() > self._session._deadline:
            self._session._timed_out = True
            raise _Refusal("timeout")

    def _refuse(self, why: str) -> None:
        self._session._resource = why
        raise _Refusal(why)

    def printf(self, *args: Any) -> Any:
        self._check_deadline()
        if not args or not isinstance(args[0], str):
            return self._call("printf", args)
        aux = self._builtin()
        budget = _MAX_VALUE_BYTES
        used, nxt = 0, 1
        for match in _PRINTF_SPEC.finditer(args[0]):
            _flags, width, precision, _length, kind = match.groups()
            if kind == "%":
                continue
            for part in (width, precision):
                if part == "*":
                    amount = abs(_sqlite_int(args[nxt], aux)) if nxt < len(args) else 0
                    nxt += 1
                else:
                    amount = int(part) if part else 0
                used += amount
            if kind:
                nxt += 1
            if used > budget:
                self._refuse(f"printf/format asks for widths and precisions of {used:,} characters in all "
                             f"(at most {budget:,})")
        return self._call("printf", args)

    def instr(self, haystack: Any, needle: Any) -> Any:
        self._check_deadline()
        if haystack is None or needle is None:
            return None
        if haystack.__class__ is needle.__class__ and haystack.__class__ in (str, bytes):
            return haystack.find(needle) + 1  # characters for text, bytes for blobs, as SQLite
        if _byte_size(haystack) * _byte_size(needle) > self.MAX_SEARCH_WORK:
            self._refuse("instr over huge mixed-type arguments")
        return self._call("instr", (haystack, needle))

    def replace(self, text: Any, old: Any, new: Any) -> Any:
        self._check_deadline()
        if text is None or old is None or new is None:
            return None
        if text.__class__ is str and old.__class__ is str and new.__class__ is str:
            if not old:
                return text
            size = len(text) + text.count(old) * (len(new) - len(old))
            if 4 * size > _MAX_VALUE_BYTES and len(text.encode()) + text.count(old) * (
                len(new.encode()) - len(old.encode())
            ) > _MAX_VALUE_BYTES:
                self._refuse("replace() would build a string or blob too big")
            return text.replace(old, new)
        if _byte_size(text) * _byte_size(old) > self.MAX_SEARCH_WORK:
            self._refuse("replace over huge mixed-type arguments")
        return self._call("replace", (text, old, new))

    def _trimmer(self, name: str, strip: Any) -> Any:
        """trim(X, Y) compares every character of X with every character of Y: 40,000 x 40,000
        takes 4 s. Duplicates in Y change nothing, so the work is bounded by the distinct ones."""

        def trim(text: Any, chars: Any) -> Any:
            self._check_deadline()
            if text is None or chars is None:
                return None
            if text.__class__ is str and chars.__class__ is str:
                distinct = "".join(dict.fromkeys(chars))
                if len(text) * len(distinct) > self.MAX_SEARCH_WORK:
                    self._refuse(f"{name}() over {len(text):,} characters with {len(distinct):,} distinct characters to remove")
                return strip(text, distinct)
            if _byte_size(text) * _byte_size(chars) > self.MAX_SEARCH_WORK:
                self._refuse(f"{name}() over huge mixed-type arguments")
            return self._call(name, (text, chars))

        return trim

    def randomblob(self, size: Any) -> Any:
        self._check_deadline()
        if _sqlite_int(size, self._builtin()) > _MAX_VALUE_BYTES:
            self._refuse("randomblob() asked for a string or blob too big")
        return self._call("randomblob", (size,))

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
        self._resource: str | None = None  # why a bounded function refused its arguments
        self._bounded: _BoundedFunctions | None = None
        self.conn = sqlite3.connect(
            executor._uri, uri=True, timeout=executor.timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            self.conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _MAX_VALUE_BYTES)
            self.conn.execute("PRAGMA temp_store = MEMORY")  # temp b-trees and sorters in the capped heap
            if not executor._heap_limited:
                # process-wide; SQLite only ever lowers it through this pragma
                self.conn.execute(f"PRAGMA hard_heap_limit = {executor.heap_limit_mb << 20}")
                executor._heap_limited = True
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
        if self._bounded is not None:
            self._bounded.close()

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
        self._resource = None
        conn = self.conn
        if self._bounded is None:
            low = sql.lower()
            if any(name in low for name in _BOUNDED_NAMES):
                self._bounded = _BoundedFunctions(self)
                self._bounded.install(conn)
        if len(sql) >= 2 * ex._heavy_budget:  # shorter texts cannot hold more terms (each is >= 2 chars)
            heavy = len(_HEAVY_TERM.findall(sql))
            if heavy > ex._heavy_budget:
                return failed(
                    RESOURCE,
                    f"the query applies {heavy} string/blob operations (functions, ||, LIKE); at most "
                    f"{ex._heavy_budget} fit its {ex.timeout_s:g} s timeout, since one row's expressions cannot "
                    "be interrupted",
                    time.perf_counter() - start,
                )
        token = ex.watchdog.watch(conn, deadline)
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
            if self._resource is not None:
                return failed(RESOURCE, self._resource, elapsed)
            kind = _classify(message)
            if self._bounded is not None and "user-defined function raised exception" in message:
                message += (" (a bounded replacement of printf/instr/replace/trim/randomblob could not read its "
                            "arguments, e.g. text that is not valid UTF-8)")
            if kind == RESOURCE and "out of memory" in message.lower():
                message += _HEAP_NOTE.format(ex.heap_limit_mb)
            if self._denied:
                kind = REJECTED
                message = f"{message}: read-only access forbids {', '.join(dict.fromkeys(self._denied[:3]))}"
            return failed(kind, message, elapsed)
        except (MemoryError, OverflowError) as exc:
            note = _HEAP_NOTE.format(ex.heap_limit_mb) if isinstance(exc, MemoryError) else ""
            return failed(RESOURCE, f"{type(exc).__name__}: {exc}{note}", time.perf_counter() - start)
        except Exception as exc:  # noqa: BLE001 - e.g. a NUL character: the program's fault, reported as such
            return failed(RUNTIME, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
        finally:
            ex.watchdog.unwatch(token)


class SQLiteExecutor:
    """Runs single read-only SQL queries on one SQLite file; safe to share between threads.

    A missing database file is reported per run as an ``EnvironmentError`` Execution rather than
    raised at construction: an executor may be built before its database is materialized, and
    callers that want to fail fast (metrics, the optimizer's input checks) test `exists()`.
    """

    def __init__(
        self,
        db_path: str | os.PathLike,
        timeout_s: float = 30.0,
        max_rows: int = 100_000,
        watchdog: Watchdog | None = None,
        heap_limit_mb: int = DEFAULT_HEAP_LIMIT_MB,
    ):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
        if max_rows < 0:
            raise ValueError(f"max_rows must be >= 0, got {max_rows!r}")
        if heap_limit_mb < 16:
            raise ValueError(f"heap_limit_mb must be >= 16, got {heap_limit_mb!r}")
        self.db_path = str(db_path)
        self.timeout_s = float(timeout_s)
        self.max_rows = int(max_rows)
        self.heap_limit_mb = int(heap_limit_mb)
        # share one between executors made per query, so each does not start its own thread
        self.watchdog = watchdog if watchdog is not None else Watchdog()
        self._heap_limited = False
        self._heavy_budget = max(_MIN_HEAVY_TERMS, int(self.timeout_s / _HEAVY_TERM_S))
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
        if pending_wal(self.db_path):
            raise sqlite3.OperationalError(_wal_message(self.db_path))
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
        if pending_wal(self.db_path):
            return failed(ENVIRONMENT, _wal_message(self.db_path))
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


def _wal_message(db_path: str) -> str:
    return (
        f"{db_path} has un-checkpointed changes in {db_path}-wal, which a read-only immutable open "
        "would not see (and a plain read-only open would write -shm/-wal files beside it); checkpoint "
        f"it once: sqlite3 {db_path} 'PRAGMA wal_checkpoint(TRUNCATE)'"
    )
