"""What the five benchmark adapters share: their loader table (read by the registry), schema rendering,
and Task assembly.

Metrics, executors and HERO-T environments are imported only when a task is built or used, so one
benchmark's optional engine (Neo4j, FalkorDB, the Python sandbox) never breaks the others.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.tasks.base import Task
from dspy_hero.tasks.seeds import seed_prompt

BENCHMARK_LOADERS = {
    "bird": "dspy_hero.tasks.bird:load_bird",
    "spider": "dspy_hero.tasks.spider:load_spider",
    "cypherbench": "dspy_hero.tasks.cypherbench:load_cypherbench",
    "bigcodebench": "dspy_hero.tasks.bigcodebench:load_bigcodebench",
    "dscodebench": "dspy_hero.tasks.dscodebench:load_dscodebench",
}


def sqlite_schema(db_path: str | Path) -> str:
    """The CREATE statements of a SQLite database, read through a fresh read-only connection."""
    uri = f"{Path(db_path).resolve().as_uri()}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        rows = conn.execute(
            "SELECT sql FROM sqlite_master WHERE type IN ('table', 'view') AND sql IS NOT NULL "
            "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
        ).fetchall()
    finally:
        conn.close()
    return ";\n".join(r[0].strip() for r in rows) + (";" if rows else "")


def tables_json_schema(entry: dict[str, Any]) -> str:
    """A schema text from a Spider/BIRD ``tables.json`` entry, for when no database file is present."""
    tables = entry["table_names_original"]
    cols: dict[int, list[str]] = {i: [] for i in range(len(tables))}
    for (t, name), kind in zip(entry["column_names_original"], entry["column_types"]):
        if t >= 0:
            cols[t].append(f"`{name}` {kind.upper()}")
    return "\n".join(f"CREATE TABLE `{t}` ({', '.join(cols[i])});" for i, t in enumerate(tables))


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from exc


def build_task(
    *,
    name: str,
    language: str,
    train: Sequence[dspy.Example],
    test: Sequence[dspy.Example],
    metric_factory: Callable[[], Any],
    program_inputs: Sequence[str],
    group_key: str | None,
    split_note: str,
    extras: dict[str, Any] | None = None,
    environment_options: dict[str, Any] | None = None,
    instructions: str | None = None,
) -> Task:
    """Assemble a Task whose program uses the seed instructions (default: the benchmark's seed prompt)
    and only the LM-facing inputs.

    HERO-T's environments come from one `EnvironmentCache` per task (one environment per database or
    graph, not an engine per instance); `environment_options` go to each, e.g. the metric's ``engine``.
    """
    from dspy_hero.execution.environments import EnvironmentCache
    from dspy_hero.tasks.programs import GenerateProgram

    instructions = seed_prompt(name) if instructions is None else instructions
    inputs = tuple(program_inputs)

    def make_program() -> dspy.Module:
        return GenerateProgram(language, inputs, instructions=instructions)

    return Task(
        name=name,
        language=language,
        train=list(train),
        test=list(test),
        metric=metric_factory(),
        make_program=make_program,
        group_key=group_key,
        environment_for=EnvironmentCache(**(environment_options or {})),
        split_note=split_note,
        extras={"program_inputs": list(inputs), **(extras or {})},
    )
