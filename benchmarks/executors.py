"""Executor overheads: what the guards cost over running the engine bare.

Prints three measurements (issue 2's targets in brackets):

* SQL: `SQLiteExecutor.run` over raw ``sqlite3`` (``mode=ro`` connect, execute, fetchall, close) on the
  same queries — the Spider dev gold queries when ``../shared/benchmarks`` is present, else queries
  over a generated database. Each query is timed both ways alternately, `rounds` times; the best
  time per query and side is kept (load spikes only ever add time), and the ratio is of their sums.
  [≤ 1.10×]
* Python sandbox: median wall ms of ``PythonSandbox.run("pass")`` minus that of a bare
  ``python -I -S -c pass`` with the same interpreter and flags the sandbox uses (plain
  ``python -c pass`` is printed too). [≤ 40 ms added per run]
* FalkorDB: median latency of read queries through ``FalkorDBExecutor`` on a small graph (and the
  embedded server's start-up time), and how many correct queries from 8 threads fail while the
  server is killed 3 times and cut for 2 runaways (``--restart-seconds``). [0 failures]

Sections whose executor is not importable are skipped with a message. Usage::

    python benchmarks/executors.py [--rounds 15] [--sandbox-runs 30] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dspy_hero.execution.sqlite import SQLiteExecutor


def shared_benchmarks() -> Path:
    env = os.environ.get("HERO_SHARED")
    if env:
        root = Path(env)
        return root / "benchmarks" if (root / "benchmarks").is_dir() else root
    return ROOT.parent / "shared" / "benchmarks"


# --- SQL ------------------------------------------------------------------------------------------


def spider_workload() -> list[tuple[str, str]] | None:
    spider = shared_benchmarks() / "spider"
    if not (spider / "dev.json").is_file():
        return None
    dbs = {}
    for folder in (spider / "databases").iterdir():
        files = sorted(folder.glob("*.sqlite"))
        if files:
            dbs[folder.name.lower()] = str(files[0])
    rows = json.loads((spider / "dev.json").read_text())
    return [
        (dbs[r["db_id"].lower()], r["query"])
        for r in rows
        if r["gold_executes_on_derived_db"] and r["db_id"].lower() in dbs
    ]


def generated_workload(folder: str) -> list[tuple[str, str]]:
    path = os.path.join(folder, "bench.sqlite")
    rnd = random.Random(0)
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE person (id INTEGER PRIMARY KEY, name TEXT, age INTEGER, city_id INTEGER)")
    conn.execute("CREATE TABLE city (id INTEGER PRIMARY KEY, name TEXT, country TEXT)")
    conn.executemany("INSERT INTO city VALUES (?, ?, ?)", [(i, f"city{i}", f"c{i % 7}") for i in range(50)])
    conn.executemany(
        "INSERT INTO person VALUES (?, ?, ?, ?)",
        [(i, f"p{i}", rnd.randint(18, 90), rnd.randrange(50)) for i in range(5000)],
    )
    conn.commit()
    conn.close()
    queries = [
        "SELECT count(*) FROM person",
        "SELECT name, age FROM person WHERE age > 80 ORDER BY age DESC LIMIT 10",
        "SELECT c.country, avg(p.age) FROM person p JOIN city c ON p.city_id = c.id GROUP BY c.country",
        "SELECT name FROM person WHERE id = 1234",
        "SELECT c.name, count(*) FROM city c JOIN person p ON p.city_id = c.id GROUP BY c.id ORDER BY 2 DESC LIMIT 5",
        "SELECT DISTINCT age FROM person ORDER BY age",
        "SELECT * FROM city WHERE country = 'c3'",
        "SELECT max(age), min(age) FROM person WHERE city_id IN (SELECT id FROM city WHERE country = 'c1')",
    ]
    return [(path, q) for q in queries] * 40


def measure_sql(rounds: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="hero-bench-") as tmp:
        work = spider_workload()
        source = "Spider dev gold queries"
        if work is None:
            work, source = generated_workload(tmp), "generated database"
        executors = {p: SQLiteExecutor(p) for p, _ in work}
        # The bare engine as anyone opens a file read-only (``mode=ro``): the executor's own URI adds
        # ``immutable=1``, one of its guards (no -wal/-shm files, no locking), so it is not the baseline.
        uris = {p: Path(p).resolve().as_uri() + "?mode=ro" for p in executors}

        def raw_once(path: str, sql: str) -> None:
            conn = sqlite3.connect(uris[path], uri=True)
            try:
                conn.execute(sql).fetchall()
            finally:
                conn.close()

        def guarded_once(path: str, sql: str) -> None:
            executors[path].run(sql)

        for path, sql in work:  # warm the page cache and imports
            raw_once(path, sql), guarded_once(path, sql)
        # Per query, the best of `rounds` alternating timings: robust to load spikes on a shared machine.
        best_raw = [float("inf")] * len(work)
        best_ours = [float("inf")] * len(work)
        clock = time.perf_counter
        for r in range(rounds):
            for i, (path, sql) in enumerate(work):
                pair = ((raw_once, best_raw), (guarded_once, best_ours))
                for fn, best in pair if (r + i) % 2 == 0 else pair[::-1]:
                    start = clock()
                    fn(path, sql)
                    elapsed = clock() - start
                    best[i] = min(best[i], elapsed)
        raw_total, ours_total = sum(best_raw), sum(best_ours)
        per_query = sorted(o / r_ for o, r_ in zip(best_ours, best_raw))
    n = len(work)
    return {
        "source": source,
        "queries_per_pass": n,
        "rounds": rounds,
        "raw_us_per_query_best": 1e6 * raw_total / n,
        "executor_us_per_query_best": 1e6 * ours_total / n,
        "overhead_ratio_best": ours_total / raw_total,
        "overhead_ratio_median": statistics.median(per_query),
        "target_ratio": 1.10,
    }


# --- Python sandbox --------------------------------------------------------------------------------


def measure_sandbox(runs: int) -> dict:
    try:
        from dspy_hero.execution.python import PythonSandbox
    except Exception as exc:  # noqa: BLE001 - another module's job; report instead of failing
        return {"skipped": f"dspy_hero.execution.python.PythonSandbox not importable: {exc}"}
    sandbox = PythonSandbox()
    layer = sandbox.layer
    interpreter = getattr(getattr(sandbox, "_interpreter", None), "path", None) or sys.executable
    first = sandbox.run("pass")
    if not first.ok:
        return {"skipped": f"the sandbox cannot run 'pass' here: {first.describe()}", "layer": layer}
    bare, minimal, boxed = [], [], []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([interpreter, "-c", "pass"], check=True, stdin=subprocess.DEVNULL)
        bare.append(time.perf_counter() - start)
        # the sandbox starts its interpreter with -I -S, so this is the like-for-like baseline
        start = time.perf_counter()
        subprocess.run([interpreter, "-I", "-S", "-c", "pass"], check=True, stdin=subprocess.DEVNULL)
        minimal.append(time.perf_counter() - start)
        start = time.perf_counter()
        result = sandbox.run("pass")
        boxed.append(time.perf_counter() - start)
        if not result.ok:
            return {"skipped": f"a sandbox run failed: {result.describe()}", "layer": layer}
    return {
        "layer": layer,
        "interpreter": interpreter,
        "runs": runs,
        "bare_interpreter_ms_median": 1e3 * statistics.median(bare),
        "bare_interpreter_no_site_ms_median": 1e3 * statistics.median(minimal),
        "sandbox_ms_median": 1e3 * statistics.median(boxed),
        "added_ms_median": 1e3 * (statistics.median(boxed) - statistics.median(minimal)),
        "added_over_default_start_ms_median": 1e3 * (statistics.median(boxed) - statistics.median(bare)),
        "target_added_ms": 40.0,
    }


# --- FalkorDB --------------------------------------------------------------------------------------

GRAPH_SCRIPT = "\n".join(
    [f"CREATE (:Person {{id: {i}, name: 'p{i}', age: {18 + i % 60}}});" for i in range(200)]
    + [
        f"MATCH (a:Person {{id: {i}}}), (b:Person {{id: {(i * 7 + 3) % 200}}}) CREATE (a)-[:KNOWS]->(b);"
        for i in range(200)
    ]
)
CYPHER_QUERIES = [
    "MATCH (p:Person) RETURN count(p)",
    "MATCH (p:Person) WHERE p.age > 70 RETURN p.name ORDER BY p.name LIMIT 5",
    "MATCH (a:Person)-[:KNOWS]->(b:Person) WHERE a.id < 20 RETURN a.name, b.name",
    "MATCH (a:Person {id: 5})-[:KNOWS*1..3]->(b) RETURN count(DISTINCT b)",
]


def measure_falkordb(repeats: int) -> dict:
    try:
        from dspy_hero.execution.cypher import FalkorDBExecutor
    except Exception as exc:  # noqa: BLE001 - another module's job; report instead of failing
        return {"skipped": f"dspy_hero.execution.cypher.FalkorDBExecutor not importable: {exc}"}
    with tempfile.TemporaryDirectory(prefix="hero-bench-") as tmp:
        script = Path(tmp) / "people.cypher"
        script.write_text(GRAPH_SCRIPT + "\n")
        start = time.perf_counter()
        try:
            executor = FalkorDBExecutor(timeout_s=30.0)
        except Exception as exc:  # noqa: BLE001 - report why the engine did not start
            return {"skipped": f"could not start FalkorDBExecutor: {type(exc).__name__}: {exc}"}
        startup = time.perf_counter() - start
        try:
            counts = executor.load_graph("people", script)
            first = executor.run(CYPHER_QUERIES[0], "people")
            if not first.ok:
                return {"skipped": f"FalkorDB query failed: {first.describe()}"}
            times = []
            for _ in range(repeats):
                for query in CYPHER_QUERIES:
                    start = time.perf_counter()
                    result = executor.run(query, "people")
                    times.append(time.perf_counter() - start)
                    if not result.ok:
                        return {"skipped": f"FalkorDB query failed: {result.describe()}"}
        finally:
            executor.close()
    return {
        "graph": counts,
        "server_startup_ms": 1e3 * startup,
        "queries": len(times),
        "latency_ms_median": 1e3 * statistics.median(times),
        "latency_ms_p90": 1e3 * sorted(times)[int(0.9 * (len(times) - 1))],
    }


def measure_restarts(threads: int, seconds: float, kills: int, runaways: int) -> dict:
    """Correct queries from `threads` threads while the server is killed (SIGKILL, as a crash) `kills`
    times and cut for `runaways` queries that ignore the engine timeout: every correct query must
    still return its rows (issue 12 saw 169 of 22,329 fail across one restart)."""
    import signal
    import threading

    try:
        from dspy_hero.execution.cypher import FalkorDBExecutor
    except Exception as exc:  # noqa: BLE001 - another module's job; report instead of failing
        return {"skipped": f"FalkorDBExecutor not importable: {exc}"}
    runaway = "RETURN size(reduce(s = '', x IN range(1, 5000000) | s + 'xxxxxxxxxx'))"
    with tempfile.TemporaryDirectory(prefix="hero-bench-") as tmp:
        script = Path(tmp) / "people.cypher"
        script.write_text(GRAPH_SCRIPT + "\n")
        executor = FalkorDBExecutor(timeout_s=1.0, threads=4)
        try:
            executor.load_graph("people", script)
            expected = {q: executor.run(q, "people").rows for q in CYPHER_QUERIES}
            stop = threading.Event()
            counts = {"ok": 0, "failed": 0}
            failures: list[str] = []
            lock = threading.Lock()

            def worker(i: int) -> None:
                k = 0
                while not stop.is_set():
                    query = CYPHER_QUERIES[(i + k) % len(CYPHER_QUERIES)]
                    r = executor.run(query, "people")
                    good = r.ok and r.rows == expected[query]
                    with lock:
                        counts["ok" if good else "failed"] += 1
                        if not good and len(failures) < 5:
                            failures.append(r.describe())
                    k += 1

            pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
            for t in pool:
                t.start()
            events = ["kill"] * kills + ["runaway"] * runaways
            pids = {executor.pid}
            for event in events:
                time.sleep(seconds / (len(events) + 1))
                if event == "kill":
                    os.kill(executor.pid, signal.SIGKILL)
                else:
                    executor.run(runaway, "people")
                pids.add(executor.pid)
            time.sleep(seconds / (len(events) + 1))
            stop.set()
            for t in pool:
                t.join()
            pids.add(executor.pid)
        finally:
            executor.close()
    total = counts["ok"] + counts["failed"]
    return {"threads": threads, "correct_queries": total, "failed": counts["failed"], "kills": kills,
            "runaways": runaways, "servers": len(pids), "first_failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15, help="alternating timings per SQL query and side")
    parser.add_argument("--sandbox-runs", type=int, default=30)
    parser.add_argument("--falkordb-repeats", type=int, default=25)
    parser.add_argument("--skip", nargs="*", default=[], choices=["sql", "sandbox", "falkordb", "restarts"])
    parser.add_argument("--restart-seconds", type=float, default=20.0, help="length of the FalkorDB restart stress run")
    parser.add_argument("--json", type=Path, help="also write the numbers here")
    args = parser.parse_args(argv)

    results: dict[str, dict] = {}
    if "sql" not in args.skip:
        sql = results["sql"] = measure_sql(args.rounds)
        verdict = "meets" if sql["overhead_ratio_best"] <= sql["target_ratio"] else "MISSES"
        print(
            f"SQL executor overhead ({sql['source']}, {sql['queries_per_pass']} queries x {sql['rounds']} rounds): "
            f"{sql['overhead_ratio_best']:.3f}x on the summed per-query best times, {sql['overhead_ratio_median']:.3f}x median per query "
            f"(raw {sql['raw_us_per_query_best']:.1f} us/query, executor {sql['executor_us_per_query_best']:.1f} us/query) "
            f"-> {verdict} the <= {sql['target_ratio']:.2f}x target"
        )
    if "sandbox" not in args.skip:
        box = results["sandbox"] = measure_sandbox(args.sandbox_runs)
        if "skipped" in box:
            print(f"Python sandbox: skipped ({box['skipped']})")
        else:
            verdict = "meets" if box["added_ms_median"] <= box["target_added_ms"] else "MISSES"
            print(
                f"Python sandbox start-up ({box['layer']} layer, {box['runs']} runs): {box['sandbox_ms_median']:.1f} ms "
                f"median vs bare interpreter {box['bare_interpreter_no_site_ms_median']:.1f} ms with the sandbox's "
                f"-I -S flags ({box['bare_interpreter_ms_median']:.1f} ms plain) -> {box['added_ms_median']:.1f} ms "
                f"added; {verdict} the <= {box['target_added_ms']:.0f} ms target"
            )
    if "falkordb" not in args.skip:
        fk = results["falkordb"] = measure_falkordb(args.falkordb_repeats)
        if "skipped" in fk:
            print(f"FalkorDB: skipped ({fk['skipped']})")
        else:
            print(
                f"FalkorDB query latency ({fk['queries']} queries on a {fk['graph']['nodes']}-node graph): "
                f"median {fk['latency_ms_median']:.2f} ms, p90 {fk['latency_ms_p90']:.2f} ms "
                f"(server start-up {fk['server_startup_ms']:.0f} ms)"
            )
    if "restarts" not in args.skip:
        rs = results["restarts"] = measure_restarts(8, args.restart_seconds, kills=3, runaways=2)
        if "skipped" in rs:
            print(f"FalkorDB restarts: skipped ({rs['skipped']})")
        else:
            print(
                f"FalkorDB across restarts ({rs['threads']} threads, {rs['kills']} server kills, {rs['runaways']} "
                f"runaway cuts, {rs['servers']} servers): {rs['failed']} of {rs['correct_queries']} correct queries "
                f"failed {rs['first_failures'][:2] if rs['failed'] else ''}"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
