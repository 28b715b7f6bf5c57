"""Issue 12, class E: hostile SQL that slipped past SQLiteExecutor's time, memory and file guards.

Each attack of the issue (and variants) must fail with a clear error type, return within twice the
timeout (plus scheduling slack on a loaded machine; unguarded, these attacks run 10-30 s), stay
under the executor's memory cap, and leave no file next to the database or in the temp directory.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dspy_hero.execution.base import ENVIRONMENT, RESOURCE, TIMEOUT
from dspy_hero.execution.sqlite import SQLiteExecutor, Watchdog

TIMEOUT_S = 0.5
SLACK_S = 1.5  # scheduling noise on a shared machine; the guarded runs take ~TIMEOUT_S
ROOT = Path(__file__).resolve().parents[1]

# name, sql, accepted error types (or the exact rows, when the bounded version answers in time)
TIME_ATTACKS = [
    (
        "printf precision x3 (issue)",
        "SELECT length(printf('%.*c', 2000000000, 'x')), length(printf('%.*c', 2000000000, 'y')), "
        "length(printf('%.*c', 2000000000, 'z'))",
        {RESOURCE, TIMEOUT},
    ),
    ("format alias", "SELECT length(format('%.*c', 2000000000, 'x'))", {RESOURCE, TIMEOUT}),
    ("literal precision", "SELECT length(printf('%.2000000000c', 'x'))", {RESOURCE, TIMEOUT}),
    ("quoted function name", 'SELECT length("PRINTF"(\'%.*c\', 2000000000, \'x\'))', {RESOURCE, TIMEOUT}),
    (
        "precision from text argument",
        "SELECT length(printf('%.*c', '2000000000', 'x'))",
        {RESOURCE, TIMEOUT},
    ),
    (  # each spec under the value limit, together far over it
        "many specs",
        "SELECT length(printf('" + "%.*c" * 40 + "', " + ", ".join(["10000000, 'x'"] * 40) + "))",
        {RESOURCE, TIMEOUT},
    ),
    (
        "instr quadratic search",
        "SELECT instr(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b')",
        ((0,),),  # linear-time search: the right answer, at once
    ),
    (
        "replace quadratic search",
        "SELECT length(replace(printf('%.*c', 4000000, 'a'), printf('%.*c', 2000000, 'a') || 'b', ''))",
        ((4000000,),),
    ),
    (
        "blob instr quadratic search",
        "SELECT instr(zeroblob(4000000), zeroblob(2000000) || x'01')",
        {RESOURCE, TIMEOUT},
    ),
    (
        "trim quadratic",
        "SELECT length(trim(printf('%.*c', 1000000, 'a'), printf('%.*c', 1000000, 'b') || 'a'))",
        ((0,),),  # the distinct characters to remove are two: linear time, the right answer
    ),
    (
        "trim with many distinct characters",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 50000) "
        "SELECT length(ltrim(printf('%.*c', 1000000, 'a'), (SELECT group_concat(char(x + 256), '') FROM c) || 'a'))",
        {RESOURCE, TIMEOUT},
    ),
    (
        "rtrim blob against text, quadratic",
        "SELECT length(rtrim(CAST(printf('%.*c', 1000000, 'a') AS BLOB), printf('%.*c', 1000000, 'b') || 'a'))",
        {RESOURCE, TIMEOUT},
    ),
    (  # one row's expressions run no deadline check: a chain of value-sized operations
        "hex chain",
        "WITH t(a) AS (SELECT randomblob(2000000)) SELECT " + "+".join(["length(hex(a))"] * 300) + " FROM t",
        {RESOURCE, TIMEOUT},
    ),
    (
        "upper chain",
        "WITH t(a) AS (SELECT printf('%.*c', 4000000, 'x')) SELECT " + "+".join(["length(upper(a))"] * 300) + " FROM t",
        {RESOURCE, TIMEOUT},
    ),
    (
        "concat chain",
        "WITH t(a) AS (SELECT zeroblob(2000000)) SELECT " + "+".join(["length(a||a)"] * 300) + " FROM t",
        {RESOURCE, TIMEOUT},
    ),
    (
        "zeroblob hex columns",
        "SELECT " + ", ".join(["length(hex(zeroblob(2000000)))"] * 100),
        {RESOURCE, TIMEOUT},
    ),
    (  # many slow calls per row: the progress handler fires only every few thousand instructions
        "randomblob per row",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 1000) "
        "SELECT length(randomblob(4000000)) FROM c",
        {RESOURCE, TIMEOUT},
    ),
    (
        "randomblob columns",
        "SELECT " + ", ".join(["length(randomblob(4000000))"] * 120),
        {RESOURCE, TIMEOUT},
    ),
]
MEMORY_ATTACKS = [
    ("randomblob x6 (issue)", "SELECT " + ", ".join(["randomblob(200000000)"] * 6)),
    ("randomblob under the value limit x100", "SELECT " + ", ".join(["randomblob(4000000)"] * 100)),
    ("zeroblob materialized x100", "SELECT " + ", ".join(["hex(zeroblob(2000000))"] * 100)),
    (  # UNION keeps every row seen, to drop duplicates: the distinct table grows without bound
        "recursive CTE distinct table",
        "WITH RECURSIVE c(x, b) AS (SELECT 1, zeroblob(1000000) UNION SELECT x + 1, zeroblob(1000000) || x "
        "FROM c) SELECT count(*) FROM c",
    ),
    (
        "sort of big rows",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 2000) "
        "SELECT x, zeroblob(1000000) || x FROM c ORDER BY random() LIMIT 1 OFFSET 1998",
    ),
]
TEMP_FILE_ATTACKS = [
    (  # the issue's: 1.2 GB of temp files on a read-only connection
        "recursive CTE with randomblob",
        "WITH RECURSIVE c(x, b) AS (SELECT 1, randomblob(100000) UNION SELECT x + 1, randomblob(100000) "
        "FROM c) SELECT count(*) FROM c",
    ),
    (
        "big sort",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) "
        "SELECT x, zeroblob(2000) || x FROM c ORDER BY random() LIMIT 1",
    ),
    (
        "distinct over blobs",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 200000) "
        "SELECT count(*) FROM (SELECT DISTINCT zeroblob(2000) || x FROM c)",
    ),
]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("e") / "bank.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE account (id INTEGER PRIMARY KEY, owner TEXT, balance REAL)")
    conn.executemany("INSERT INTO account VALUES (?, ?, ?)", [(i, f"o{i}", 10.0 * i) for i in range(50)])
    conn.commit()
    conn.close()
    return path


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("name,sql,expected", TIME_ATTACKS, ids=[a[0] for a in TIME_ATTACKS])
def test_single_call_attacks_stop_in_time(db, name, sql, expected):
    before = _listing(db.parent)
    executor = SQLiteExecutor(db, timeout_s=TIMEOUT_S, max_rows=100)
    start = time.monotonic()
    result = executor.run(sql)
    elapsed = time.monotonic() - start
    if isinstance(expected, tuple):
        assert result.ok and result.rows == expected, f"{name}: {result}"
    else:
        assert not result.ok and result.error_type in expected and result.error_message, f"{name}: {result}"
    assert elapsed < 2 * TIMEOUT_S + SLACK_S, f"{name} took {elapsed:.1f} s"
    assert _listing(db.parent) == before


class _TempFileSpy:
    """Samples this process's open SQLite temp files (``etilqs_*``, unlinked at once, so only
    /proc/self/fd still shows them) and records the largest total size seen."""

    def __init__(self) -> None:
        self.peak = 0
        self.names: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            total = 0
            for fd in os.listdir("/proc/self/fd"):
                try:
                    target = os.readlink(f"/proc/self/fd/{fd}")
                    if "etilqs_" in target:
                        self.names.add(target)
                        total += os.stat(f"/proc/self/fd/{fd}").st_size
                except OSError:
                    continue
            self.peak = max(self.peak, total)
            time.sleep(0.005)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to see unlinked temp files")
@pytest.mark.parametrize("name,sql", TEMP_FILE_ATTACKS, ids=[a[0] for a in TEMP_FILE_ATTACKS])
def test_no_temp_files(db, name, sql):
    executor = SQLiteExecutor(db, timeout_s=2 * TIMEOUT_S)
    with _TempFileSpy() as spy:
        result = executor.run(sql)
    assert spy.names == set() and spy.peak == 0, f"{name}: temp files {spy.names}, {spy.peak} bytes"
    assert result.ok or result.error_type in (RESOURCE, TIMEOUT), result


_MEMORY_PROBE = """
import json, resource, sys, time
from dspy_hero.execution.sqlite import SQLiteExecutor
db, heap_mb, sql = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ex = SQLiteExecutor(db, timeout_s=20.0, max_rows=10, heap_limit_mb=heap_mb)
ex.run("SELECT 1")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
result = ex.run(sql)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"ok": result.ok, "type": result.error_type, "message": result.error_message,
                  "growth_mb": (after - before) / 1024}))
"""
HEAP_MB = 256


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss in KiB is Linux's")
@pytest.mark.parametrize("name,sql", MEMORY_ATTACKS, ids=[a[0] for a in MEMORY_ATTACKS])
def test_memory_stays_under_the_heap_cap(db, name, sql):
    """Run in a child process: the heap limit is process-wide and the peak RSS is per process. A
    long timeout, so the memory guard and not the clock must stop each attack."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, str(db), str(HEAP_MB), sql],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not report["ok"] and report["type"] == RESOURCE, f"{name}: {report}"
    # the heap cap plus the Python copy of one value in flight
    assert report["growth_mb"] < HEAP_MB + 64, f"{name}: peak RSS grew {report['growth_mb']:.0f} MiB"


def test_default_executor_stops_the_issue_memory_attack(db):
    r = SQLiteExecutor(db, timeout_s=5.0).run(MEMORY_ATTACKS[0][1])
    assert not r.ok and r.error_type == RESOURCE


def _wal_database(folder: Path) -> Path:
    path = folder / "wal.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1), (2)")
    conn.commit()
    conn.close()  # the last connection checkpoints and removes -wal/-shm
    return path


def test_wal_database_read_only_open_creates_no_files(tmp_path):
    path = _wal_database(tmp_path)
    assert _listing(tmp_path) == ["wal.sqlite"]
    executor = SQLiteExecutor(path)
    assert executor.run("SELECT sum(x) FROM t").rows == ((3,),)
    with executor.session() as session:
        assert session.run("SELECT count(*) FROM t").rows == ((2,),)
    assert _listing(tmp_path) == ["wal.sqlite"]


def test_pending_wal_is_a_clear_error_not_stale_rows(tmp_path):
    path = _wal_database(tmp_path)
    writer = sqlite3.connect(path)
    try:
        writer.execute("PRAGMA wal_autocheckpoint = 0")
        writer.execute("INSERT INTO t VALUES (40)")
        writer.commit()  # lives in wal.sqlite-wal only: an immutable open would miss it
        r = SQLiteExecutor(path).run("SELECT sum(x) FROM t")
        assert not r.ok and r.error_type == ENVIRONMENT and "wal_checkpoint" in r.error_message
        with pytest.raises(sqlite3.OperationalError, match="wal"):
            SQLiteExecutor(path).session()
    finally:
        writer.close()
    assert SQLiteExecutor(path).run("SELECT sum(x) FROM t").rows == ((43,),)


# Exactness: the bounded replacements must give the built-ins' answers on ordinary arguments.
SEMANTIC_CASES = [
    "SELECT printf('%d|%5.2f|%-4s|%x|%c|%q|%%|%s', 42, 3.14159, 'ab', 255, 'xyz', 'it''s', NULL)",
    "SELECT format('%.*f and %*d', 3, 2.5, 6, 7)",
    "SELECT printf('%s', x'414243'), printf(), printf(NULL), printf(12)",
    "SELECT printf('%!.20g %,d %lld %.3c', 0.1, 1234567, 5, 'z')",
    "SELECT instr('hello', 'l'), instr('hello', ''), instr('', ''), instr(x'010203', x'03'), instr(12.5, '.'), "
    "instr(NULL, 'a'), instr('a', NULL), instr(123, 2), instr('é日本', '本')",
    "SELECT replace('banana', 'an', 'AN'), replace('abc', '', 'x'), replace('aaa', 'a', NULL), "
    "replace(NULL, 'a', 'b'), replace(1.5, '.', ','), replace(x'6161', 'a', 'b'), replace('日本日', '日', 'x')",
    "SELECT length(randomblob(0)), length(randomblob(-3)), length(randomblob(NULL)), length(randomblob(17)), "
    "typeof(randomblob(4)), length(randomblob('12'))",
    "SELECT owner FROM account WHERE instr(owner, '1') > 0 ORDER BY id",
    "SELECT replace(owner, 'o', 'O') FROM account ORDER BY id LIMIT 3",
]


@pytest.mark.parametrize("sql", SEMANTIC_CASES)
def test_bounded_functions_match_the_builtins(db, sql):
    raw = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        expected = raw.execute(sql).fetchall()
    finally:
        raw.close()
    result = SQLiteExecutor(db).run(sql)
    assert result.ok, result
    assert [tuple(r) for r in result.rows] == [tuple(r) for r in expected]


def test_watchdog_is_an_object_and_survives_fork(db):
    """No module-level watchdog: each executor owns one or shares one it is given; a forked child
    gets a working one (its parent's thread does not exist there)."""
    shared = Watchdog()
    a, b = SQLiteExecutor(db, watchdog=shared), SQLiteExecutor(db, watchdog=shared)
    assert a.watchdog is b.watchdog is shared
    assert SQLiteExecutor(db).watchdog is not SQLiteExecutor(db).watchdog
    a.run("SELECT 1")  # starts the shared thread in this process
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # child: a runaway query with no progress handler must still be interrupted
        code = 1
        try:
            signal.alarm(10)  # without a working watchdog the query below never ends
            conn = sqlite3.connect(":memory:")
            shared.watch(conn, time.monotonic() + 0.2)
            try:
                conn.execute("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT max(x) FROM c").fetchall()
            except sqlite3.OperationalError as exc:
                code = 0 if "interrupt" in str(exc) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_idle_watchdog_threads_exit(db):
    """Executors made per query or per environment each own a watchdog: their threads must end
    once idle, not pile up for the life of the process."""
    def watchdogs() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "dspy-hero-sqlite-watchdog")

    for _ in range(20):
        assert SQLiteExecutor(db).run("SELECT 1").ok
    deadline = time.monotonic() + 10 * Watchdog.IDLE_EXIT_S + 5
    while watchdogs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert watchdogs() == 0
