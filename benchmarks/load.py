"""Load benchmark: many sandboxed Python executions and SQL executions from worker threads.

Checks what a long optimization run relies on: every valid program succeeds with the right output
(failures must be 0), nothing is left behind (sandbox processes, sandbox temp dirs, open file
descriptors, files next to the database: all must be 0), and the database bytes are unchanged.

Usage:
    python benchmarks/load.py [--threads 2] [--sandbox-runs 1000] [--sql-runs 10000] [--layer auto] [--json out.json]

Exit status 1 when any failure or leak is found.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dspy_hero.execution.leaks import now_ticks, sandbox_processes, wait_for_exit
from dspy_hero.execution.python import TEMP_PREFIX, PythonSandbox
from dspy_hero.execution.sqlite import SQLiteExecutor

# (program, expected stdout) pairs: small but varied valid programs
PROGRAMS = [
    ("print(sum(range(1000)))", "499500"),
    ("import json\nprint(json.dumps({'a': [1, 2, 3]}, sort_keys=True))", '{"a": [1, 2, 3]}'),
    ("def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\nprint(fib(50))", "12586269025"),
    ("words = 'the quick brown fox jumps over the lazy dog'.split()\nprint(len(set(words)), max(words, key=len))", "8 quick"),
    ("import collections\nprint(collections.Counter('mississippi').most_common(1)[0])", "('i', 4)"),
    ("import re\nprint(re.findall(r'\\d+', 'a1b22c333'))", "['1', '22', '333']"),
]
UNITTEST = (
    "def add(a, b):\n    return a + b\n",
    "import unittest\nclass TestCases(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
)

QUERIES = [
    "SELECT COUNT(*) FROM items",
    "SELECT category, COUNT(*), ROUND(AVG(price), 2) FROM items GROUP BY category ORDER BY category",
    "SELECT name FROM items WHERE price > 90 ORDER BY name LIMIT 5",
    "SELECT i.name, c.label FROM items i JOIN categories c ON c.id = i.category WHERE i.id % 97 = 0 ORDER BY i.id",
    "SELECT MAX(price) - MIN(price) FROM items",
    "WITH t AS (SELECT category, SUM(price) s FROM items GROUP BY category) SELECT category FROM t ORDER BY s DESC LIMIT 1",
]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def drive(one, runs: int, threads: int, ms_digits: int) -> dict:
    """Call ``one(i) -> (ok, seconds, failure message)`` for i < runs on `threads` workers; report
    throughput, latency and failures."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = list(pool.map(one, range(runs)))
    wall = time.perf_counter() - start
    failures = [msg for ok, _, msg in results if not ok]
    latencies = sorted(t for _, t, _ in results)
    return {
        "runs": runs,
        "threads": threads,
        "wall_s": round(wall, 2),
        "throughput_per_s": round(runs / wall, 1),
        "median_ms": round(statistics.median(latencies) * 1000, ms_digits),
        "p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000, ms_digits),
        "failures": len(failures),
        "failure_examples": failures[:3],
    }


def run_sandbox(runs: int, threads: int, layer: str = "auto") -> dict:
    # a private parent for the runs' dirs: other programs on the machine may use the sandbox too
    temp_root = tempfile.mkdtemp(prefix="hero-load-")
    try:
        os.chmod(temp_root, 0o711)
        sandbox = PythonSandbox(timeout_s=30.0, layer=layer, temp_dir=temp_root)
        layer = sandbox.layer
        since = now_ticks()
        procs, fds = sandbox_processes(since), open_fds()

        def one(i: int) -> tuple[bool, float, str]:
            start = time.perf_counter()
            if i % 10 == 9:
                result = sandbox.run_unittest(*UNITTEST)
                ok = result.ok and result.details.get("tests_run") == 1
            else:
                code, expected = PROGRAMS[i % len(PROGRAMS)]
                result = sandbox.run(code)
                ok = result.ok and (result.output or "").strip() == expected
            return ok, time.perf_counter() - start, "" if ok else result.describe()

        return {
            "layer": layer,
            **drive(one, runs, threads, ms_digits=1),
            "leaked_processes": len(wait_for_exit(procs, since)),
            "leaked_temp_dirs": len([n for n in os.listdir(temp_root) if n.startswith(TEMP_PREFIX)]),
            "leaked_fds": max(0, open_fds() - fds),
        }
    finally:
        shutil.rmtree(temp_root, ignore_errors=True)


def build_database(path: Path) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE categories (id INTEGER PRIMARY KEY, label TEXT)")
    con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, category INTEGER REFERENCES categories(id), price REAL)")
    con.executemany("INSERT INTO categories VALUES (?, ?)", [(i, f"cat{i}") for i in range(10)])
    con.executemany("INSERT INTO items VALUES (?, ?, ?, ?)",
                    [(i, f"item{i:05d}", i % 10, round((i * 37) % 1000 / 10, 2)) for i in range(5000)])
    con.commit()
    con.close()


def run_sql(runs: int, threads: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="hero-load-sql-") as tmp:
        db = Path(tmp) / "load.sqlite"
        build_database(db)
        digest = hashlib.sha256(db.read_bytes()).hexdigest()
        listing = sorted(os.listdir(tmp))
        raw = sqlite3.connect(db)
        expected = [tuple(map(tuple, raw.execute(q).fetchall())) for q in QUERIES]
        raw.close()
        executor = SQLiteExecutor(db, timeout_s=30.0)
        fds = open_fds()

        def one(i: int) -> tuple[bool, float, str]:
            start = time.perf_counter()
            result = executor.run(QUERIES[i % len(QUERIES)])
            ok = result.ok and tuple(map(tuple, result.rows or ())) == expected[i % len(QUERIES)]
            return ok, time.perf_counter() - start, "" if ok else result.describe()

        return {
            **drive(one, runs, threads, ms_digits=3),
            "database_unchanged": hashlib.sha256(db.read_bytes()).hexdigest() == digest,
            "leaked_files": len(set(os.listdir(tmp)) - set(listing)),
            "leaked_fds": max(0, open_fds() - fds),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="worker threads (num_threads)")
    parser.add_argument("--sandbox-runs", type=int, default=1000)
    parser.add_argument("--sql-runs", type=int, default=10000)
    parser.add_argument("--layer", default="auto", help="sandbox layer: auto, docker, bwrap or rlimit")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.sandbox_runs < 0 or args.sql_runs < 0:
        parser.error("--threads must be >= 1 and run counts >= 0")
    report: dict = {}
    if args.sandbox_runs:
        report["sandbox"] = run_sandbox(args.sandbox_runs, args.threads, args.layer)
    if args.sql_runs:
        report["sql"] = run_sql(args.sql_runs, args.threads)
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    bad = 0
    for part in report.values():
        bad += part["failures"] + part.get("leaked_processes", 0) + part.get("leaked_temp_dirs", 0)
        bad += part.get("leaked_files", 0) + part.get("leaked_fds", 0) + (0 if part.get("database_unchanged", True) else 1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
