"""Prompt layout for prefix reuse: every seed program shows the LM the inputs shared across examples
(schemas) before the per-example ones (question, task prompt), inside the user message, so the prompt
prefix a local server reuses covers the long shared part (no model needed)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from dspy_hero.lm.adapter import ProgramAdapter
from dspy_hero.lm.local import shared_prefix_end
from dspy_hero.tasks.registry import load_task

SHARED = {"db_schema", "graph_schema"}
PER_EXAMPLE = {"question", "prompt", "evidence"}
SPIDER = Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "spider"

ADAPTER_INPUTS = {
    "dspy_hero.tasks.spider": "PROGRAM_INPUTS",
    "dspy_hero.tasks.bird": "PROGRAM_INPUTS",
    "dspy_hero.tasks.cypherbench": "PROGRAM_INPUTS",
    "dspy_hero.tasks.bigcodebench": "PROGRAM_INPUTS",
    "dspy_hero.tasks.dscodebench": "PROGRAM_INPUTS",
    "dspy_hero.tasks.builtin.sql_tasks": "INPUTS",
    "dspy_hero.tasks.builtin.cypher_tasks": "INPUTS",
    "dspy_hero.tasks.builtin.python_tasks": "INPUTS",
}


def assert_shared_first(fields) -> None:
    fields = list(fields)
    unknown = [f for f in fields if f not in SHARED | PER_EXAMPLE]
    assert not unknown, f"classify {unknown} as shared or per-example in this test"
    kinds = ["shared" if f in SHARED else "per-example" for f in fields]
    assert kinds == sorted(kinds, key=lambda k: k != "shared"), f"shared inputs must come first: {fields}"


@pytest.mark.parametrize("module", sorted(ADAPTER_INPUTS))
def test_every_adapter_lists_shared_inputs_first(module):
    assert_shared_first(getattr(importlib.import_module(module), ADAPTER_INPUTS[module]))


@pytest.mark.parametrize("name", ["builtin-sql", "builtin-cypher", "builtin-python"])
def test_builtin_seed_programs_show_shared_inputs_first(name):
    task = load_task(name)
    try:
        assert_shared_first(task.make_program().generate.signature.input_fields)
    finally:
        task.close()


def test_spider_seed_program_shows_the_schema_first():
    if not SPIDER.is_dir():
        pytest.skip(f"Spider data not found under {SPIDER}")
    task = load_task("spider", data_dir=SPIDER)
    try:
        assert list(task.make_program().generate.signature.input_fields) == ["db_schema", "question"]
    finally:
        task.close()


def user_message(program, example) -> tuple[str, str]:
    """(system, last user message) exactly as the seed program's adapter renders them."""
    sig = program.generate.signature
    inputs = {k: v for k, v in example.inputs().items() if k in sig.input_fields}
    messages = ProgramAdapter().format(sig, demos=[], inputs=inputs)
    return messages[0]["content"], messages[-1]["content"]


def test_the_reusable_prefix_covers_the_schema_and_is_the_same_within_a_database():
    task = load_task("builtin-sql")
    try:
        program = task.make_program()
        by_db: dict[str, list] = {}
        for ex in task.train + task.test:
            by_db.setdefault(ex.db_id, []).append(ex)
        (_, (a1, a2, *_)), (_, (b1, *_)) = list(by_db.items())[:2]
        prefixes = {}
        for ex in (a1, a2, b1):
            system, user = user_message(program, ex)
            # The paper's rule: task inputs go in the user message, not in the instructions.
            assert ex.db_schema not in system and ex.question not in system
            prefix = user[: shared_prefix_end(user)]
            assert ex.db_schema in prefix and ex.question not in prefix
            assert ex.question in user[shared_prefix_end(user):]
            prefixes[ex.question] = prefix
        assert prefixes[a1.question] == prefixes[a2.question]  # one database: one reusable prefix
        assert prefixes[a1.question] != prefixes[b1.question]
    finally:
        task.close()


def test_shared_prefix_end_reads_only_line_headers():
    two = "[[ ## db_schema ## ]]\nCREATE TABLE t (a);\n\n[[ ## question ## ]]\nHow many?\n\n" \
          "Respond with the corresponding output fields, starting with the field `[[ ## sql ## ]]`."
    assert two[: shared_prefix_end(two)] == "[[ ## db_schema ## ]]\nCREATE TABLE t (a);\n\n"
    one = "[[ ## prompt ## ]]\nWrite f.\n\nRespond with `[[ ## code ## ]]`."
    assert one[: shared_prefix_end(one)] == "[[ ## prompt ## ]]\n"
    assert shared_prefix_end("no fields at all, [[ ## x ## ]] quoted") == 0
