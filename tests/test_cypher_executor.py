"""The embedded FalkorDB executor for real: start-up, loading (script and JSON), queries, normalization,
timeouts, the environment's probes, and clean shutdown (no server process left behind)."""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from dspy_hero.execution.base import (
    EMPTY_PROGRAM,
    ENVIRONMENT,
    REJECTED,
    SYNTAX,
    TIMEOUT,
    Environment,
    Executor,
)
from dspy_hero.execution.cypher_environment import CypherEnvironment, graph_schema_text
from dspy_hero.execution.cypher_graphs import read_only_violation, split_statements
from dspy_hero.execution.falkordb_executor import BoundCypherExecutor, FalkorDBExecutor
from dspy_hero.execution.falkordb_server import sweep_stale_workdirs

SCRIPT = """// a small film graph
CREATE (a:Person {name: 'Ann', born: 1970, tags: ['b', 'a']}),
       (b:Person {name: 'Bob; Jr.', born: 1980}),
       (m:Movie {title: 'Orbit', released: date('2001-05-04')}),
       (a)-[:ACTED_IN {role: 'pilot'}]->(m),
       (b)-[:DIRECTED]->(m);
/* a second statement */
CREATE (:Studio {name: 'North'});
"""

GRAPH_JSON = {
    "nodes": [
        {"id": "ann", "labels": ["Person"], "properties": {"name": "Ann", "born": 1970, "tags": ["b", "a"]}},
        {"id": "bob", "labels": ["Person"], "properties": {"name": "Bob; Jr.", "born": 1980}},
        {"id": 7, "labels": ["Movie"], "properties": {"title": "Orbit"}},
        {"id": "north", "labels": "Studio", "properties": {"name": "North"}},
    ],
    "edges": [
        {"source": "ann", "target": 7, "type": "ACTED_IN", "properties": {"role": "pilot"}},
        {"source": "bob", "target": 7, "type": "DIRECTED"},
    ],
}


def dense_graph(n: int = 14) -> dict:
    """A complete directed graph: variable-length paths explode combinatorially."""
    nodes = [{"id": i, "labels": ["D"], "properties": {"i": i}} for i in range(n)]
    edges = [{"source": i, "target": j, "type": "E"} for i in range(n) for j in range(n) if i != j]
    return {"nodes": nodes, "edges": edges}


def gone(pid: int, wait_s: float = 5.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie still answers kill(0): check its state
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().split()[2] == "Z":
                    return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = tmp_path_factory.mktemp("cypher") / "films.cypher"
    path.write_text(SCRIPT)
    json_path = path.with_suffix(".json")
    json_path.write_text(json.dumps(GRAPH_JSON))
    with FalkorDBExecutor(timeout_s=5.0, max_rows=50) as ex:
        ex.load_graph("films", path)
        ex.load_graph("films_json", json_path)
        ex.load_graph("dense", dense_graph())
        yield ex
    assert gone(ex.pid)


def test_start_and_load_from_script_and_json(engine):
    assert engine.alive()
    assert engine.graph_names() == ["dense", "films", "films_json"]
    for graph in ("films", "films_json"):
        r = engine.run("MATCH (p:Person) RETURN p.name ORDER BY p.name", graph)
        assert r.ok and r.rows == (("Ann",), ("Bob; Jr.",)) and r.columns == ("p.name",)
        r = engine.run("MATCH (p:Person)-[r:ACTED_IN]->(m:Movie) RETURN p.name, r.role, m.title", graph)
        assert r.rows == (("Ann", "pilot", "Orbit"),)
        assert engine.run("MATCH (s:Studio) RETURN count(s)", graph).rows == ((1,),)


def test_load_errors_are_clear_and_leave_nothing(engine, tmp_path):
    bad = tmp_path / "bad.cypher"
    bad.write_text("CREATE (:A {x: 1});\nCREATE (:B {y: });\n")
    with pytest.raises(ValueError, match="statement 2"):
        engine.load_graph("broken", bad)
    assert "broken" not in engine.graph_names()
    with pytest.raises(ValueError, match="already loaded"):
        engine.load_graph("films", GRAPH_JSON)
    with pytest.raises(ValueError, match="not a node id"):
        engine.load_graph("x", {"nodes": [{"id": 1}], "edges": [{"source": 1, "target": 2, "type": "T"}]})
    with pytest.raises(ValueError, match="duplicate node id"):
        engine.load_graph("x", {"nodes": [{"id": 1}, {"id": 1}]})
    with pytest.raises(FileNotFoundError):
        engine.load_graph("x", tmp_path / "missing.json")
    assert engine.graph_names() == ["dense", "films", "films_json"]


def test_empty_graph_and_replace(engine):
    assert engine.load_graph("empty", {"nodes": []}) == {"nodes": 0, "edges": 0}
    r = engine.run("MATCH (n) RETURN n", "empty")
    assert r.ok and r.rows == ()
    assert engine.load_graph("empty", {"nodes": [{"id": 1, "labels": ["X"]}]}, replace=True)["nodes"] == 1
    assert engine.run("MATCH (n:X) RETURN count(n)", "empty").rows == ((1,),)


def test_normalization_of_nodes_lists_dates_and_paths(engine):
    r = engine.run("MATCH (p:Person {name: 'Ann'}) RETURN p, p.tags", "films")
    node, tags = r.rows[0]
    assert tags == ("a", "b")  # lists sorted inside cells
    assert dict(node) == {"born": 1970, "name": "Ann", "tags": ("a", "b")}  # a node is its property map
    assert engine.run("MATCH (m:Movie) RETURN m.released", "films").rows == (("2001-05-04",),)
    r = engine.run("MATCH p = (:Person {name: 'Ann'})-[:ACTED_IN]->(:Movie) RETURN p", "films")
    assert r.ok and len(r.rows) == 1
    hash(r.rows)  # every cell is hashable
    r = engine.run("RETURN [3, 1, 2] AS xs, {b: 1, a: [2, 1]} AS m, 0.1 + 0.2 AS f", "films")
    assert r.rows == (((1, 2, 3), (("a", (1, 2)), ("b", 1)), 0.3),)


def test_errors_are_typed_executions(engine):
    assert engine.run("", "films").error_type == EMPTY_PROGRAM
    assert engine.run("  // only a comment\n", "films").error_type == EMPTY_PROGRAM
    r = engine.run("MATCH (n RETURN n", "films")
    assert not r.ok and r.error_type == SYNTAX and "Invalid input" in r.error_message
    assert engine.run("MATCH (n) RETURN elementId(n)", "films").error_type == SYNTAX
    r = engine.run("MATCH (n) RETURN n", "no_such_graph")
    assert r.error_type == ENVIRONMENT and "films" in r.error_message
    assert engine.run("MATCH (n) RETURN n;", "films").ok  # one trailing semicolon is fine
    assert engine.run("MATCH (n) RETURN n; MATCH (m) RETURN m", "films").error_type == REJECTED


def test_row_cap_marks_truncation(engine):
    r = engine.run("UNWIND range(1, 1000) AS x RETURN x", "films")
    assert r.ok and r.truncated and r.row_count == 50
    r = engine.run("UNWIND range(1, 50) AS x RETURN x", "films")
    assert r.ok and not r.truncated and r.row_count == 50


def test_runaway_variable_length_path_times_out(engine):
    t0 = time.perf_counter()
    r = engine.run("MATCH p=(a)-[*]-(b) RETURN count(p)", "dense", timeout_s=1.0)
    elapsed = time.perf_counter() - t0
    assert not r.ok and r.error_type == TIMEOUT, r
    assert elapsed < 4.0
    assert engine.run("MATCH (d:D) RETURN count(d)", "dense").rows == ((14,),)  # still serving


def test_bound_executor_and_protocols(engine):
    bound = engine.bound("films")
    assert isinstance(bound, BoundCypherExecutor) and isinstance(bound, Executor)
    assert bound.run("MATCH (m:Movie) RETURN m.title").rows == (("Orbit",),)


def test_thread_safety(engine):
    queries = [("MATCH (p:Person) RETURN count(p)", ((2,),)), ("MATCH (d:D) RETURN count(d)", ((14,),))]

    def job(i: int):
        query, expected = queries[i % 2]
        return engine.run(query, "films" if i % 2 == 0 else "dense").rows == expected

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(job, range(200)))


def test_environment_probes(engine):
    env = CypherEnvironment(engine, "films")
    assert isinstance(env, Environment) and env.language == "cypher"
    assert set(env.probes()) >= {"labels", "relationship_types", "property_keys", "sample_values", "run_subquery"}
    assert env.probe("labels").text == "Node labels: Movie, Person, Studio"
    rels = env.probe("relationship_types").text
    assert "(:Person)-[:ACTED_IN {role: STRING}]->(:Movie)" in rels and "(:Person)-[:DIRECTED]->(:Movie)" in rels
    props = env.probe("property_keys", "person").text
    assert props == "(:Person {born: INTEGER, name: STRING, tags: LIST})"
    assert "released: DATE" in env.probe("property_keys").text
    sample = env.probe("sample_values", "Person.name")
    assert sample.ok and "'Ann'" in sample.text and "'Bob; Jr.'" in sample.text
    assert not env.probe("sample_values", "Nope.name").ok
    sub = env.probe("run_subquery", "```cypher\nMATCH (m:Movie) RETURN m.title\n```")
    assert sub.ok and "1 row(s)" in sub.text and "Orbit" in sub.text
    assert not env.probe("nope").ok
    ok, why = env.check("x", env.execute("MATCH (m:Movie) RETURN m.title"))
    assert ok, why
    ok, why = env.check("x", env.execute("CREATE (n)"))
    assert not ok and "Rejected" in why


def test_graph_schema_text(engine):
    text = graph_schema_text(engine, "films_json")
    assert text.splitlines()[0] == "Node labels and properties:"
    assert "  (:Person {born: INTEGER, name: STRING, tags: LIST})" in text
    assert "  (:Person)-[:ACTED_IN {role: STRING}]->(:Movie)" in text


def test_environment_owning_its_engine_from_a_graph_file(tmp_path):
    path = tmp_path / "films.json"
    path.write_text(json.dumps(GRAPH_JSON))
    env = CypherEnvironment(graph="films", graph_source=str(path), timeout_s=5.0)
    pid = env.executor.pid
    assert env.execute("MATCH (p:Person) RETURN count(p)").rows == ((2,),)
    env.close()
    assert gone(pid)


def test_lexical_guard_ignores_strings_and_comments():
    assert read_only_violation("MATCH (n {name: 'LOAD CSV; CALL x.y()'}) RETURN n") is None
    assert read_only_violation("MATCH (n) RETURN n // ; LOAD CSV") is None
    assert read_only_violation("CALL { MATCH (n) RETURN n } RETURN n") is None
    assert read_only_violation("CALL db.labels() YIELD label RETURN label") is None
    assert "LOAD CSV" in read_only_violation("load  csv from 'file:///etc/passwd' AS r RETURN r")
    assert "procedure" in read_only_violation("CALL db.idx.fulltext.createNodeIndex('A', 'x')")
    assert split_statements("CREATE (:A {s: 'x;y'}); // c;\nCREATE (:B)") == ["CREATE (:A {s: 'x;y'})", "CREATE (:B)"]


def test_clean_shutdown_after_close_and_after_garbage_collection():
    ex = FalkorDBExecutor(timeout_s=5.0)
    pid = ex.pid
    ex.close()
    assert gone(pid)
    assert ex.run("RETURN 1", "g").error_type == ENVIRONMENT  # closed: a clear error, no exception
    ex.close()  # idempotent

    ex = FalkorDBExecutor(timeout_s=5.0)
    pid = ex.pid
    workdir = ex._server.workdir
    del ex
    gc.collect()
    assert gone(pid), "the server outlived its garbage-collected executor"
    assert not os.path.exists(workdir)


def test_server_is_killed_when_its_python_process_dies(tmp_path):
    """SIGKILL the owning interpreter: the kernel death signal must take the server with it."""
    import signal
    import subprocess
    import sys

    code = (
        "import sys, time, threading\n"
        "from dspy_hero.execution.falkordb_executor import FalkorDBExecutor\n"
        "holder = []\n"
        "t = threading.Thread(target=lambda: holder.append(FalkorDBExecutor(timeout_s=5.0)))\n"
        "t.start(); t.join()\n"  # started from a short-lived thread, which then ends
        "time.sleep(0.3)\n"
        "print(holder[0].pid, holder[0].alive(), holder[0]._server.workdir, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid_text, alive, workdir = proc.stdout.readline().split()
        assert alive == "True", "the server died with the thread that started it"
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        assert gone(int(pid_text)), "the server outlived its killed parent process"
        assert os.path.isdir(workdir)  # a killed process cannot clean up ...
        assert workdir in sweep_stale_workdirs()  # ... so the next start sweeps its directory away
        assert not os.path.exists(workdir)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_latency_of_a_simple_match(engine):
    """Median latency of a simple MATCH on a small graph (reported; generous bound)."""
    samples = []
    for _ in range(200):
        t0 = time.perf_counter()
        engine.run("MATCH (p:Person {name: 'Ann'}) RETURN p.name", "films")
        samples.append(time.perf_counter() - t0)
    samples.sort()
    median_ms = samples[len(samples) // 2] * 1000
    print(f"FalkorDB simple MATCH median latency: {median_ms:.3f} ms")
    assert median_ms < 50


def test_start_up_time():
    t0 = time.perf_counter()
    with FalkorDBExecutor(timeout_s=5.0) as ex:
        started = time.perf_counter() - t0
        assert ex.alive()
    print(f"FalkorDB server start-up: {started * 1000:.0f} ms")
    assert started < 10


def test_concurrent_loads_of_one_graph_load_it_once(tmp_path):
    from dspy_hero.execution.cypher_environment import ensure_loaded

    with FalkorDBExecutor(timeout_s=5.0) as ex:
        barrier = threading.Barrier(4)

        def load():
            barrier.wait()
            ensure_loaded(ex, "films", GRAPH_JSON)

        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ex.run("MATCH (p:Person) RETURN count(p)", "films").rows == ((2,),)
