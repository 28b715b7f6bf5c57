"""BIRD-SQL as a task: text-to-SQL over SQLite with external knowledge, BIRD execution semantics.

Official layout: ``<dir>/train/train.json`` + ``<dir>/train/train_databases/<db>/<db>.sqlite`` and
``<dir>/dev/dev.json`` + ``<dir>/dev/dev_databases/<db>/<db>.sqlite`` (+ ``dev_tables.json``); the
mini-dev set as ``<dir>/mini_dev/mini_dev_sqlite.json``. The shared copy has DEV and mini-dev questions
and only EMPTY schema-only databases (``<dir>/schema_only_sqlite/<db>/<db>.sqlite``).

Paper split (Appendix A): TRAIN for optimization, DEV for evaluation, pools partitioned by database.
When TRAIN is absent, the evaluation file is partitioned by database into optimization/evaluation
instead, and the split note says so. On schema-only databases every query returns no rows, so any
executable prediction matches the gold: such runs test plumbing and executability, not accuracy,
and the note says that too.
"""

from __future__ import annotations

from pathlib import Path

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.benchmarks import build_task, read_json, sqlite_schema, tables_json_schema
from dspy_hero.tasks.hub import find_data_dir, no_hub
from dspy_hero.tasks.splits import Split, cap, describe_groups, split_by_group

INPUTS = ("question", "db_schema", "evidence", "db_id", "db_path")
PROGRAM_INPUTS = ("db_schema", "question", "evidence")  # shared schema first: its KV is reused

# split name -> (question files, database folders), relative to the data root, first found wins
_LAYOUT = {
    "train": (["train/train.json", "train.json"], ["train/train_databases", "train_databases"]),
    "dev": (["dev/dev.json", "dev.json"], ["dev/dev_databases", "dev_databases", "schema_only_sqlite"]),
    "mini_dev": (["mini_dev/mini_dev_sqlite.json", "mini_dev_sqlite.json"],
                 ["mini_dev/dev_databases", "dev/dev_databases", "dev_databases", "schema_only_sqlite"]),
}


def _first(root: Path, names: list[str], kind: str) -> Path | None:
    return next((root / n for n in names if (root / n).exists() and ((root / n).is_dir() == (kind == "dir"))), None)


def _database(root: Path, folders: list[str], db_id: str) -> Path | None:
    for folder in folders:
        path = root / folder / db_id / f"{db_id}.sqlite"
        if path.is_file():
            return path
    return None


def read_bird(root: Path, split: str) -> tuple[list[dspy.Example], dict[str, object]]:
    """Examples of one BIRD split (train, dev or mini_dev) whose database (or schema) is present."""
    files, folders = _LAYOUT[split]
    qfile = _first(root, files, "file")
    if qfile is None:
        return [], {"file": None}
    rows = read_json(qfile)
    if not isinstance(rows, list):
        raise ValueError(f"{qfile}: expected a JSON list of questions")  # noqa: TRY004 - bad data, not a bad argument
    tables_file = _first(root, [f"{split}/{split}_tables.json", f"{split}_tables.json", "dev_tables.json"], "file")
    tables = {t["db_id"]: t for t in read_json(tables_file)} if tables_file else {}
    schemas: dict[str, str] = {}
    stats: dict[str, object] = {"file": str(qfile), "rows": len(rows), "no_database": 0, "schema_only": set()}
    examples = []
    for i, row in enumerate(rows):
        db_id = row["db_id"]
        path = _database(root, folders, db_id)
        if path is None:
            stats["no_database"] += 1  # type: ignore[operator]
            continue
        if "schema_only" in str(path.parent.parent.name):
            stats["schema_only"].add(db_id)  # type: ignore[union-attr]
        if db_id not in schemas:
            schemas[db_id] = sqlite_schema(path) or (tables_json_schema(tables[db_id]) if db_id in tables else "")
        qid = row.get("question_id", i)
        examples.append(
            dspy.Example(
                example_id=f"bird/{split}/{qid}",
                question=row["question"],
                db_schema=schemas[db_id],
                evidence=row.get("evidence", "") or "",
                db_id=db_id,
                db_path=str(path),
                gold_sql=row.get("SQL") or row["query"],
                difficulty=row.get("difficulty", ""),
            ).with_inputs(*INPUTS)
        )
    return examples, stats


def bird_split(
    data_dir=None,
    split_seed: int = 0,
    limit: int | None = None,
    eval_set: str = "dev",
    test_fraction: float = 0.5,
    semantics: str = "bird",
    **_: object,
) -> Split:
    """BIRD with the paper's split when TRAIN is present, else `eval_set` partitioned by database.

    `eval_set` is ``"dev"`` (1,534 questions) or ``"mini_dev"`` (500). `limit` caps each pool.
    """
    if eval_set not in ("dev", "mini_dev"):
        raise ValueError(f"eval_set must be 'dev' or 'mini_dev', got {eval_set!r}")
    root = find_data_dir("bird", data_dir)
    if root is None:
        raise no_hub("bird", "the hub does not hold BIRD's SQLite databases, which execution needs")
    evaluation, estats = read_bird(root, eval_set)
    if not evaluation:
        raise ValueError(f"bird: no usable {eval_set} questions under {root} (stats: {estats})")
    train_rows, tstats = read_bird(root, "train")
    if train_rows:
        train, test = train_rows, evaluation
        how = (f"paper split: TRAIN ({tstats['file']}) for optimization, {eval_set.upper()} ({estats['file']}) "
               "for evaluation")
    else:
        train, test = split_by_group(evaluation, "db_id", test_fraction, seed=split_seed)
        how = (f"TRAIN absent, so {eval_set.upper()} ({estats['file']}, {estats['rows']} rows) is partitioned by "
               f"database (seed {split_seed}, evaluation fraction {test_fraction})")
    train, test = cap(train, limit, split_seed, "db_id"), cap(test, limit, split_seed, "db_id")
    schema_only = sorted(set(estats.get("schema_only") or ()) | set(tstats.get("schema_only") or ()))
    note = (
        f"BIRD from {root}: {how}. Optimization: {describe_groups(train, 'db_id')}. "
        f"Evaluation: {describe_groups(test, 'db_id')}."
        + (f" Each pool capped at {limit}." if limit is not None else "")
        + (f" {estats['no_database']} question(s) dropped: database absent." if estats["no_database"] else "")
        + (f" SCHEMA-ONLY (empty) databases for {', '.join(schema_only)}: every query returns no rows, so "
           "EX only measures executability there." if schema_only else "")
        + f" Semantics: {semantics} EX."
    )

    return Split(train, test, note, {"source": str(root), "schema_only_databases": schema_only})


def load_bird(
    data_dir=None,
    split_seed: int = 0,
    limit: int | None = None,
    eval_set: str = "dev",
    test_fraction: float = 0.5,
    semantics: str = "bird",
    **_: object,
) -> Task:
    """The BIRD Task: the pools of `bird_split`, the official metric and the paper-style seed program."""
    split = bird_split(data_dir=data_dir, split_seed=split_seed, limit=limit, eval_set=eval_set, test_fraction=test_fraction, semantics=semantics)

    def metric():
        from dspy_hero.metrics.sql import sql_execution_metric

        return sql_execution_metric(semantics=semantics)

    return build_task(
        name="bird", language="sql", train=split.train, test=split.test, metric_factory=metric,
        program_inputs=PROGRAM_INPUTS, group_key="db_id", split_note=split.note,
        extras=split.extras,
    )
