"""Spider as a task: SQLite text-to-SQL with Spider's execution-accuracy semantics.

Layout: ``<dir>/dev.json`` (+ optional ``train_spider.json``) and ``<dir>/database/<db_id>/<db_id>.sqlite``
(official) or ``<dir>/databases/...`` (the derived databases in ``../shared/benchmarks/spider``, whose
folder names are lowercased). Rows flagged ``gold_executes_on_derived_db: false`` are dropped: their
gold query does not run on the derived database, so no prediction could be scored against it.
The pool is split by database into optimization and evaluation, so evaluation measures transfer to
unseen databases.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.benchmarks import build_task, read_json, sqlite_schema
from dspy_hero.tasks.hub import find_data_dir, no_hub
from dspy_hero.tasks.splits import Split, cap, describe_groups, split_by_group

INPUTS = ("question", "db_schema", "db_id", "db_path")
PROGRAM_INPUTS = ("db_schema", "question")  # shared schema first: its KV is reused across questions


def database_path(root: Path, db_id: str) -> Path | None:
    for folder in ("database", "databases"):
        base = root / folder
        if not base.is_dir():
            continue
        for cand in (base / db_id, base / db_id.lower()):
            for name in (f"{db_id}.sqlite", f"{db_id.lower()}.sqlite"):
                if (cand / name).is_file():
                    return cand / name
    return None


def read_spider(root: Path, file: str = "dev.json") -> tuple[list[dspy.Example], dict[str, int]]:
    """Examples of one Spider question file whose database is present and whose gold executes there."""
    rows = read_json(root / file)
    if not isinstance(rows, list):
        raise ValueError(f"{root / file}: expected a JSON list of questions")  # noqa: TRY004 - bad data, not a bad argument
    stats = {"rows": len(rows), "gold_fails": 0, "no_database": 0, "gold_empty": 0}
    schemas: dict[str, str] = {}
    examples = []
    for i, row in enumerate(rows):
        if row.get("gold_executes_on_derived_db") is False:
            stats["gold_fails"] += 1
            continue
        db_id = row["db_id"]
        path = database_path(root, db_id)
        if path is None:
            stats["no_database"] += 1
            continue
        if db_id not in schemas:
            schemas[db_id] = sqlite_schema(path)
        stats["gold_empty"] += row.get("gold_nonempty_on_derived_db") is False
        examples.append(
            dspy.Example(
                example_id=f"spider/{Path(file).stem}/{i}",
                question=row["question"],
                db_schema=schemas[db_id],
                db_id=db_id,
                db_path=str(path),
                gold_sql=row["query"],
            ).with_inputs(*INPUTS)
        )
    return examples, stats


def spider_split(
    data_dir=None, split_seed: int = 0, limit: int | None = None, test_fraction: float = 0.5, **_: object
) -> Split:
    """Spider dev on the databases present, split by database into optimization/evaluation.

    `limit` caps each pool (round-robin over databases, seeded), applied after the split.
    """
    root = find_data_dir("spider", data_dir)
    if root is None:
        raise no_hub("spider", "the hub holds Spider's questions but not its SQLite databases, which execution needs")
    examples, stats = read_spider(root)
    if not examples:
        raise ValueError(f"spider: no usable questions under {root} (rows={stats['rows']}, missing databases={stats['no_database']})")
    train, test = split_by_group(examples, "db_id", test_fraction, seed=split_seed)
    train, test = cap(train, limit, split_seed, "db_id"), cap(test, limit, split_seed, "db_id")
    note = (
        f"Spider dev.json from {root}: {stats['rows']} rows, {stats['gold_fails']} dropped (gold fails on the "
        f"derived database), {stats['no_database']} dropped (database absent); remaining {len(examples)} "
        f"({stats['gold_empty']} with an empty gold result) split by "
        f"database (seed {split_seed}, evaluation fraction {test_fraction}). Optimization: "
        f"{describe_groups(train, 'db_id')}. Evaluation: {describe_groups(test, 'db_id')}."
        + (f" Each pool capped at {limit}." if limit is not None else "")
        + " Semantics: Spider EX (multiset, column permutation, order only with ORDER BY)."
    )

    return Split(train, test, note, {"source": str(root)})


def load_spider(
    data_dir=None, split_seed: int = 0, limit: int | None = None, test_fraction: float = 0.5, **_: object
) -> Task:
    """The Spider Task: the pools of `spider_split`, the official metric and the paper-style seed program."""
    split = spider_split(data_dir=data_dir, split_seed=split_seed, limit=limit, test_fraction=test_fraction)

    def metric():
        from dspy_hero.metrics.sql import sql_execution_metric

        return sql_execution_metric(semantics="spider")

    return build_task(
        name="spider", language="sql", train=split.train, test=split.test, metric_factory=metric,
        program_inputs=PROGRAM_INPUTS, group_key="db_id", split_note=split.note, extras=split.extras,
    )
