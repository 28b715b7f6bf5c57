"""SQL execution on the real benchmark data in ../shared/benchmarks (skipped when absent).

Spider: every dev question whose gold executes on the derived databases scores 1 against itself
under both semantics, and a perturbation that surely changes the result scores 0. BIRD: every
dev and mini-dev gold query executes on the schema-only databases.
"""

from __future__ import annotations

import json
from pathlib import Path

import dspy
import pytest

from dspy_hero.execution.sqlite import SQLiteExecutor
from dspy_hero.execution.sqlite_environment import SQLiteEnvironment, schema_text
from dspy_hero.metrics.sql import sql_execution_metric
from dspy_hero.tasks.hub import shared_benchmarks_dir as benchmarks_dir

BENCH = benchmarks_dir()
SPIDER = BENCH / "spider"
BIRD = BENCH / "bird"


def spider_databases() -> dict[str, Path]:
    """db_id (lower-cased) → its SQLite file; folder names and db_ids differ in case."""
    found = {}
    for folder in (SPIDER / "databases").iterdir():
        files = sorted(folder.glob("*.sqlite"))
        if files:
            found[folder.name.lower()] = files[0]
    return found


def spider_examples():
    if not (SPIDER / "dev.json").is_file():
        pytest.skip(f"Spider data not found under {SPIDER}")
    dbs = spider_databases()
    rows = json.loads((SPIDER / "dev.json").read_text())
    usable = [r for r in rows if r["gold_executes_on_derived_db"] and r["db_id"].lower() in dbs]
    return [
        (
            dspy.Example(
                question=r["question"],
                db_id=r["db_id"],
                db_path=str(dbs[r["db_id"].lower()]),
                gold_sql=r["query"],
            ).with_inputs("question", "db_id", "db_path"),
            r["gold_nonempty_on_derived_db"],
        )
        for r in usable
    ]


def perturb(gold_sql: str, nonempty: bool) -> str:
    """A query whose result surely differs: no rows for a nonempty gold, one row for an empty one."""
    if nonempty:
        return f"SELECT * FROM ({gold_sql.strip().rstrip(';')}) LIMIT 0"
    return "SELECT 1 AS perturbed"


@pytest.mark.parametrize("semantics", ["bird", "spider"])
def test_spider_gold_scores_one_and_perturbation_zero(semantics):
    examples = spider_examples()
    assert len(examples) >= 400
    metric = sql_execution_metric(semantics)
    failures = []
    for ex, nonempty in examples:
        same = metric(ex, dspy.Prediction(sql=ex.gold_sql))
        changed = metric(ex, dspy.Prediction(sql=perturb(ex.gold_sql, nonempty)))
        # a second perturbation keeps the rows but adds a column
        widened = metric(
            ex, dspy.Prediction(sql=f"SELECT *, 'extra' FROM ({ex.gold_sql.strip().rstrip(';')})")
        )
        if same.score != 1.0 or changed.score != 0.0 or (nonempty and widened.score != 0.0):
            failures.append((ex.db_id, ex.gold_sql, same.feedback, changed.feedback, widened.feedback))
    assert not failures, failures[:5]


def test_spider_gold_executability_matches_the_dataset_flags():
    if not (SPIDER / "dev.json").is_file():
        pytest.skip(f"Spider data not found under {SPIDER}")
    dbs = spider_databases()
    checked = 0
    for r in json.loads((SPIDER / "dev.json").read_text()):
        path = dbs.get(r["db_id"].lower())
        if path is None:
            continue
        result = SQLiteExecutor(path).run(r["query"])
        assert result.ok == r["gold_executes_on_derived_db"], (r["query"], result.describe())
        if result.ok:
            assert (result.row_count > 0) == r["gold_nonempty_on_derived_db"], r["query"]
        checked += 1
    assert checked >= 500


def test_spider_environment_probes_on_a_real_database():
    if not (SPIDER / "databases").is_dir():
        pytest.skip(f"Spider data not found under {SPIDER}")
    path = spider_databases()["concert_singer"]
    env = SQLiteEnvironment(path)
    schema = env.probe("schema")
    assert schema.ok and "CREATE TABLE singer" in schema.text and "CREATE TABLE stadium" in schema.text
    values = env.probe("sample_values", "singer.country")
    assert values.ok and "Netherlands" in values.text
    sub = env.probe("run_subquery", "SELECT count(*) FROM singer")
    assert sub.ok and "returned 1 row(s)" in sub.text
    assert schema.text == schema_text(path)


def bird_gold(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text().splitlines():
        if line.strip():
            sql, db_id = line.rsplit("\t", 1)
            pairs.append((sql, db_id.strip()))
    return pairs


@pytest.mark.parametrize("gold_file", ["dev/dev_gold.sql", "mini_dev/mini_dev_sqlite_gold.sql"])
def test_bird_gold_executes_on_schema_only_databases(gold_file):
    path = BIRD / gold_file
    if not path.is_file() or not (BIRD / "schema_only_sqlite").is_dir():
        pytest.skip(f"BIRD data not found under {BIRD}")
    pairs = bird_gold(path)
    failures, empty = [], 0
    for sql, db_id in pairs:
        result = SQLiteExecutor(BIRD / "schema_only_sqlite" / db_id / f"{db_id}.sqlite").run(sql)
        if not result.ok:
            failures.append((db_id, sql, result.describe()))
        # the tables are empty: at most a row of aggregates over nothing (NULL or 0)
        elif all(c in (None, 0) for row in result.rows for c in row):
            empty += 1
    assert not failures, failures[:5]
    assert empty >= 0.99 * len(pairs)


def test_bird_schema_text_lists_every_table():
    tables_json = BIRD / "dev_tables.json"
    if not tables_json.is_file():
        pytest.skip(f"BIRD data not found under {BIRD}")
    for entry in json.loads(tables_json.read_text()):
        db_id = entry["db_id"]
        text = schema_text(BIRD / "schema_only_sqlite" / db_id / f"{db_id}.sqlite")
        lines = [line for line in text.splitlines() if line.startswith("CREATE TABLE")]
        assert len(lines) == len(entry["table_names_original"]), db_id
