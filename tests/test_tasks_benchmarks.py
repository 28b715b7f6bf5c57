"""Benchmark adapters on tiny fixtures in the official layouts (always run) and on the shared data
(skipped when ../shared/benchmarks is absent): field conventions, inputs, no label leaks, splits."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import dspy
import pytest

from dspy_hero.fields import LABEL_FIELDS
from dspy_hero.tasks import bigcodebench, bird, cypherbench, dscodebench, spider
from dspy_hero.tasks.hub import DataUnavailable, find_data_dir, hub_reachable, shared_benchmarks_dir
from dspy_hero.tasks.splits import cap, split_by_fraction, split_by_group

SHARED = shared_benchmarks_dir()
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/benchmarks absent")


# ---------------------------------------------------------------- fixtures in the official layouts

def make_db(path: Path, table: str, rows: list[tuple]) -> None:
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.execute(f'CREATE TABLE "{table}" (id INTEGER PRIMARY KEY, name TEXT)')
    conn.executemany(f'INSERT INTO "{table}" VALUES (?, ?)', rows)
    conn.commit()
    conn.close()


@pytest.fixture
def spider_dir(tmp_path: Path) -> Path:
    rows = []
    for d in ("alpha", "Beta_DB", "gamma", "delta"):
        make_db(tmp_path / "database" / d / f"{d}.sqlite", f"t_{d.lower()}", [(1, "a"), (2, "b")])
        for k in range(3):
            rows.append({"db_id": d, "question": f"How many rows in {d}? ({k})", "query": f"SELECT count(*) FROM t_{d.lower()}"})
    rows.append({"db_id": "alpha", "question": "broken", "query": "SELECT x", "gold_executes_on_derived_db": False})
    rows.append({"db_id": "missing_db", "question": "no db", "query": "SELECT 1"})
    (tmp_path / "dev.json").write_text(json.dumps(rows))
    return tmp_path


@pytest.fixture
def bird_dir(tmp_path: Path) -> Path:
    def write(split: str, dbs: list[str], start: int) -> None:
        rows = []
        for i, d in enumerate(dbs * 2):
            make_db(tmp_path / split / f"{split}_databases" / d / f"{d}.sqlite", "items", [(1, "x")])
            rows.append({"question_id": start + i, "db_id": d, "question": f"q{i} on {d}", "evidence": "items = things",
                         "SQL": "SELECT name FROM items", "difficulty": "simple"})
        (tmp_path / split / f"{split}.json").write_text(json.dumps(rows))
    write("dev", ["d1", "d2", "d3"], 0)
    return tmp_path


@pytest.fixture
def cypher_dir(tmp_path: Path) -> Path:
    rows = [{"qid": f"q{i}", "graph": g, "nl_question": f"Which {g} thing {i}?",
             "gold_cypher": f"MATCH (n:Thing) RETURN n.name LIMIT {i}"} for i, g in enumerate(["art", "nba"] * 5)]
    (tmp_path / "test.json").write_text(json.dumps(rows))
    schemas = tmp_path / "graphs" / "schemas"
    schemas.mkdir(parents=True)
    for g in ("art", "nba"):
        (schemas / f"{g}_schema.json").write_text(json.dumps({
            "name": g, "entities": [{"label": "Thing", "description": None, "properties": {"year": "int"}}],
            "relations": [{"label": "likes", "subj_label": "Thing", "obj_label": "Thing", "properties": {}}]}))
    return tmp_path


def bcb_row(i: int, libs: list[str]) -> dict:
    return {"task_id": f"BigCodeBench/{i}", "complete_prompt": f"def task_func():\n    '''task {i}'''\n",
            "instruct_prompt": f"Write task {i}.", "canonical_solution": "    return 1\n",
            "code_prompt": "def task_func():\n", "test": "import unittest\nclass TestCases(unittest.TestCase):\n    pass\n",
            "entry_point": "task_func", "doc_struct": "{}", "libs": repr(libs)}


@pytest.fixture
def bcb_dir(tmp_path: Path) -> Path:
    rows = [bcb_row(i, ["random", "itertools"] if i % 2 else ["numpy", "os"]) for i in range(12)]
    sneaky = bcb_row(12, ["random", "itertools"])  # libs say stdlib, but its tests import a third-party package
    sneaky["test"] = "import unittest\nfrom faker import Faker\nclass TestCases(unittest.TestCase):\n    pass\n"
    rows.append(sneaky)
    with gzip.open(tmp_path / "bigcodebench_part.jsonl.gz", "wt") as fh:
        fh.write("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


@pytest.fixture
def ds_dir(tmp_path: Path) -> Path:
    rows = [{"problem_id": f"{lib}_{i}", "library": lib, "code_problem": f"Solve {lib} problem {i}.",
             "ground_truth_code": "def f(x):\n    return x\n", "test_script": "def test_case_input_generator(n=200):\n    return [(1,)]\n"}
            for lib in ("numpy", "pandas") for i in range(5)]
    (tmp_path / "ds.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return tmp_path


# ---------------------------------------------------------------- shared checks

def check_examples(examples, inputs, labels, program_inputs):
    assert examples
    for ex in examples:
        assert set(ex.inputs().keys()) == set(inputs)
        assert not set(ex.inputs().keys()) & set(LABEL_FIELDS)
        for label in labels:
            assert ex[label], label
            assert label in ex.labels()
        assert set(program_inputs) <= set(inputs)
        assert isinstance(ex["example_id"], str)
    ids = [ex.example_id for ex in examples]
    assert len(set(ids)) == len(ids)


def check_split(split_fn, group, **kw):
    a, b = split_fn(**kw), split_fn(**kw)
    assert [e.example_id for e in a.train] == [e.example_id for e in b.train]
    assert [e.example_id for e in a.test] == [e.example_id for e in b.test]
    train_ids, test_ids = {e.example_id for e in a.train}, {e.example_id for e in a.test}
    assert train_ids and test_ids and not train_ids & test_ids
    if group:
        assert not {str(e[group]) for e in a.train} & {str(e[group]) for e in a.test}
    assert a.note
    return a


# ---------------------------------------------------------------- fixtures: each adapter

def test_spider_fixture(spider_dir):
    s = check_split(spider.spider_split, "db_id", data_dir=spider_dir)
    check_examples(s.train + s.test, spider.INPUTS, ["gold_sql"], spider.PROGRAM_INPUTS)
    assert len(s.train) + len(s.test) == 12  # broken gold and missing database dropped
    assert "1 dropped (gold fails" in s.note and "1 dropped (database absent)" in s.note
    ex = s.train[0]
    assert Path(ex.db_path).is_file() and "CREATE TABLE" in ex.db_schema
    seeds = {tuple(e.db_id for e in spider.spider_split(data_dir=spider_dir, split_seed=k).test) for k in range(6)}
    assert len(seeds) > 1  # the seed changes which databases are held out


def test_bird_fixture_without_train_partitions_dev_by_database(bird_dir):
    s = check_split(bird.bird_split, "db_id", data_dir=bird_dir)
    check_examples(s.train + s.test, bird.INPUTS, ["gold_sql"], bird.PROGRAM_INPUTS)
    assert "TRAIN absent" in s.note and "partitioned by database" in s.note
    assert all(ex.evidence == "items = things" and ex.difficulty == "simple" for ex in s.train)


def test_bird_fixture_with_train_uses_paper_split(bird_dir):
    rows = [{"question_id": 100 + i, "db_id": "t1", "question": f"train q{i}", "evidence": "", "SQL": "SELECT 1"} for i in range(3)]
    (bird_dir / "train").mkdir()
    (bird_dir / "train" / "train.json").write_text(json.dumps(rows))
    make_db(bird_dir / "train" / "train_databases" / "t1" / "t1.sqlite", "items", [(1, "x")])
    s = bird.bird_split(data_dir=bird_dir)
    assert "paper split" in s.note
    assert {e.db_id for e in s.train} == {"t1"} and len(s.test) == 6
    assert all(e.example_id.startswith("bird/train/") for e in s.train)


def test_cypherbench_fixture(cypher_dir):
    s = check_split(cypherbench.cypherbench_split, None, data_dir=cypher_dir)
    check_examples(s.train + s.test, cypherbench.INPUTS, ["gold_cypher"], cypherbench.PROGRAM_INPUTS)
    ex = s.train[0]
    assert "(:Thing {name: str, year: int})" in ex.graph_schema and "-[:likes]->" in ex.graph_schema
    assert ex.graph_source == "" and "Graph dumps present for: none" in s.note
    assert "question level" in s.note


def test_bigcodebench_fixture_split_ratio_and_stdlib_filter(bcb_dir):
    s = check_split(bigcodebench.bigcodebench_split, None, data_dir=bcb_dir)
    check_examples(s.train + s.test, bigcodebench.INPUTS, ["test_code"], bigcodebench.PROGRAM_INPUTS)
    assert len(s.train) == round(13 * 500 / 1137) and len(s.train) + len(s.test) == 13
    assert s.train[0].prompt.startswith("Write task")
    assert s.train[0].canonical_solution == "def task_func():\n    return 1\n"  # header + official body
    std = bigcodebench.bigcodebench_split(data_dir=bcb_dir, stdlib_only=True)
    assert all(set(e.libs) == {"random", "itertools"} for e in std.train + std.test)
    assert "7 dropped by stdlib_only" in std.note and "BigCodeBench/12" not in {e.example_id for e in std.train + std.test}
    ex = next(e for e in s.train + s.test if "numpy" in e.libs)
    assert ex.library == "numpy"
    excl = bigcodebench.bigcodebench_split(data_dir=bcb_dir, exclude=["BigCodeBench/0"])
    assert "BigCodeBench/0" not in {e.example_id for e in excl.train + excl.test}
    comp = bigcodebench.bigcodebench_split(data_dir=bcb_dir, variant="complete")
    assert comp.train[0].prompt.startswith("def task_func")


def test_dscodebench_fixture(ds_dir):
    s = check_split(dscodebench.dscodebench_split, None, data_dir=ds_dir)
    check_examples(s.train + s.test, dscodebench.INPUTS, ["ground_truth_code", "test_script"], dscodebench.PROGRAM_INPUTS)
    assert {e.library for e in s.train + s.test} == {"numpy", "pandas"}
    only = dscodebench.dscodebench_split(data_dir=ds_dir, libraries=["pandas"])
    assert {e.library for e in only.train + only.test} == {"pandas"}


def test_missing_data_dir_is_a_clear_error(tmp_path):
    with pytest.raises(DataUnavailable, match="does not exist"):
        spider.spider_split(data_dir=tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="jsonl"):
        bigcodebench.bigcodebench_split(data_dir=tmp_path)


def test_hub_check_is_fast_and_honours_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HERO_SHARED", str(tmp_path))  # no local copy anywhere
    monkeypatch.delenv("HERO_DATA_DIR", raising=False)
    assert hub_reachable() is False
    with pytest.raises(DataUnavailable, match="not reachable"):
        cypherbench.cypherbench_split()
    with pytest.raises(DataUnavailable, match="HERO_DATA_DIR"):
        spider.spider_split()


@pytest.mark.parametrize("name", ["cypherbench", "bigcodebench", "dscodebench"])
def test_load_builds_task_when_metric_exists(name, request):
    module = {"cypherbench": "dspy_hero.metrics.cypher"}.get(name, "dspy_hero.metrics.python")
    pytest.importorskip(module)
    data = request.getfixturevalue({"cypherbench": "cypher_dir", "bigcodebench": "bcb_dir", "dscodebench": "ds_dir"}[name])
    loader = getattr({"cypherbench": cypherbench, "bigcodebench": bigcodebench, "dscodebench": dscodebench}[name], f"load_{name}")
    task = loader(data_dir=data)
    try:
        assert task.split_note and task.train and task.test and task.group_key in task.train[0]
        program = task.make_program()
        assert program.generate.signature.instructions.startswith("You are an expert")
    finally:
        task.close()


def test_bad_json_is_reported_with_its_path(tmp_path):
    (tmp_path / "dev.json").write_text("{not json")
    with pytest.raises(ValueError, match="dev.json"):
        spider.spider_split(data_dir=tmp_path)


def test_splits_helpers():
    exs = [dspy.Example(example_id=f"e{i}", g=f"g{i % 4}") for i in range(40)]
    train, test = split_by_group(exs, "g", 0.5, seed=3)
    assert {e.g for e in train}.isdisjoint({e.g for e in test}) and len(train) + len(test) == 40
    a, b = split_by_fraction(exs, 0.25, seed=1)
    assert len(a) == 10 and len(b) == 30 and split_by_fraction(exs, 0.25, seed=1)[0] == a
    assert split_by_fraction(exs, 0.25, seed=2)[0] != a
    capped = cap(exs, 8, seed=0, group="g")
    assert len(capped) == 8 and len({e.g for e in capped}) == 4
    with pytest.raises(ValueError):
        split_by_group([dspy.Example(example_id="x", g="one")], "g", 0.5)


def test_benchmarks_are_registered():
    from dspy_hero.tasks import registry

    assert {"bird", "spider", "cypherbench", "bigcodebench", "dscodebench"} <= set(registry.available_tasks())


def test_load_spider_builds_task_with_seed_program(spider_dir):
    pytest.importorskip("dspy_hero.metrics.sql")
    from dspy_hero.lm.scripted import engine_of, scripted_lm
    from dspy_hero.tasks.seeds import SEED_PROMPTS

    task = spider.load_spider(data_dir=spider_dir)
    assert task.group_key == "db_id" and task.language == "sql" and task.split_note
    program = task.make_program()
    assert program.generate.signature.instructions == SEED_PROMPTS["spider"]
    lm = scripted_lm(lambda req: {"sql": f"```sql\nSELECT count(*) FROM t_{req.inputs['question'].split()[4][:-1].lower()}\n```"})
    ex = task.test[0]
    with dspy.context(lm=lm):
        pred = program(**ex.inputs())
    assert pred.sql.startswith("SELECT count(*)")
    seen = engine_of(lm).calls[0]
    assert set(seen.inputs) == set(spider.PROGRAM_INPUTS)  # no path, no gold in the LM's user message
    assert ex.gold_sql not in seen.system
    assert task.metric(ex, pred).score == 1.0


# ---------------------------------------------------------------- the shared data

@needs_shared
def test_shared_spider():
    s = spider.spider_split()
    assert len(s.train) + len(s.test) == 449  # rows whose gold executes on the derived databases
    check_examples(s.train[:20] + s.test[:20], spider.INPUTS, ["gold_sql"], spider.PROGRAM_INPUTS)
    assert not {e.db_id for e in s.train} & {e.db_id for e in s.test}


@needs_shared
def test_shared_bird_dev_and_mini_dev():
    s = bird.bird_split()
    assert len(s.train) + len(s.test) == 1534 and "SCHEMA-ONLY" in s.note
    assert not {e.db_id for e in s.train} & {e.db_id for e in s.test}
    check_examples(s.train[:20], bird.INPUTS, ["gold_sql"], bird.PROGRAM_INPUTS)
    m = bird.bird_split(eval_set="mini_dev", limit=10)
    assert len(m.train) == len(m.test) == 10 and "MINI_DEV" in m.note


@needs_shared
def test_shared_cypherbench():
    s = cypherbench.cypherbench_split()
    assert len(s.train) + len(s.test) == 192
    check_examples(s.train, cypherbench.INPUTS, ["gold_cypher"], cypherbench.PROGRAM_INPUTS)
    assert "relation types only" in s.note
    art = next(e for e in s.train + s.test if e.graph == "art")
    assert "(:Painting)-[:displayedAt]->(:Museum)" in art.graph_schema


@needs_shared
def test_shared_bigcodebench_and_dscodebench():
    b = bigcodebench.bigcodebench_split()
    assert len(b.train) + len(b.test) == 570 and len(b.train) == round(570 * 500 / 1137)
    std = bigcodebench.bigcodebench_split(stdlib_only=True)
    assert 0 < len(std.train) + len(std.test) < 570
    assert all(bigcodebench.is_stdlib(e.libs) for e in std.train)
    d = dscodebench.dscodebench_split()
    assert len(d.train) + len(d.test) == 500 and len(d.train) == round(500 * 500 / 982)
    check_examples(d.train[:10], dscodebench.INPUTS, ["ground_truth_code", "test_script"], dscodebench.PROGRAM_INPUTS)


def test_find_data_dir_env(monkeypatch, tmp_path):
    (tmp_path / "spider").mkdir()
    monkeypatch.setenv("HERO_DATA_DIR", str(tmp_path))
    assert find_data_dir("spider") == tmp_path / "spider"


def simplekg(graph: str) -> dict:
    return {
        "schema": {"name": graph, "entities": [], "relations": []},
        "entities": [
            {"eid": "Painting#Q1", "label": "Painting", "name": "Mona Lisa", "aliases": [], "description": None,
             "properties": {"inception": "1503-01-01"}, "provenance": []},
            {"eid": "Painting#Q2", "label": "Painting", "name": "Guernica", "aliases": [], "description": None,
             "properties": {}, "provenance": []},
            {"eid": "Museum#Q3", "label": "Museum", "name": "Louvre", "aliases": [], "description": None,
             "properties": {}, "provenance": []},
            {"eid": "Museum#Q4", "label": "Museum", "name": "Reina Sofia", "aliases": [], "description": None,
             "properties": {}, "provenance": []},
        ],
        "relations": [
            {"rid": "0", "label": "displayedAt", "subj_id": "Painting#Q1", "obj_id": "Museum#Q3", "properties": {}},
            {"rid": "1", "label": "displayedAt", "subj_id": "Painting#Q2", "obj_id": "Museum#Q4", "properties": {}},
        ],
    }


def test_cypherbench_simplekg_dump_is_converted_for_the_engine(cypher_dir, tmp_path):
    from dspy_hero.execution.cypher_graphs import read_graph_source

    dumps = cypher_dir / "graphs" / "simplekg"
    dumps.mkdir()
    (dumps / "art.json").write_text(json.dumps(simplekg("art")))
    cache = tmp_path / "cache"
    s = cypherbench.cypherbench_split(data_dir=cypher_dir, cache_dir=cache)
    art = [e for e in s.train + s.test if e.graph == "art"]
    assert art and all(e.graph_source.startswith(str(cache)) for e in art)
    assert all(e.graph_source == "" for e in s.train + s.test if e.graph == "nba")
    parsed = read_graph_source(art[0].graph_source)
    assert len(parsed.nodes) == 4 and len(parsed.edges) == 2
    assert "Graph dumps present for: art" in s.note
    again = cypherbench.cypherbench_split(data_dir=cypher_dir, cache_dir=cache)  # cached conversion reused
    assert [e.graph_source for e in again.train] == [e.graph_source for e in s.train]
    bad = simplekg("art")
    bad["relations"][0]["obj_id"] = "Museum#nope"
    with pytest.raises(ValueError, match="not an entity"):
        cypherbench.simplekg_to_graph(bad)


def test_cypherbench_metric_runs_on_a_converted_dump(cypher_dir, tmp_path):
    pytest.importorskip("dspy_hero.metrics.cypher")
    dumps = cypher_dir / "graphs" / "simplekg"
    dumps.mkdir()
    (dumps / "art.json").write_text(json.dumps(simplekg("art")))
    task = cypherbench.load_cypherbench(data_dir=cypher_dir, cache_dir=tmp_path / "cache")
    try:
        ex = next(e for e in task.train + task.test if e.graph == "art")
        gold = dspy.Example(**{**ex.toDict(), "gold_cypher": "MATCH (p:Painting)-[:displayedAt]->(m:Museum) RETURN m.name"})
        same = dspy.Prediction(cypher="MATCH (m:Museum)<-[:displayedAt]-(:Painting) RETURN m.name AS museum")
        other = dspy.Prediction(cypher="MATCH (m:Museum) WHERE m.name = 'Louvre' RETURN m.name")
        assert task.metric(gold, same).score == 1.0
        assert task.metric(gold, other).score == 0.0
    finally:
        task.close()
