"""The example-field contract (dspy_hero.fields): the one reader, the label refusal, the environment
dispatch, and that no other module keeps its own list of label or locator fields."""

from __future__ import annotations

import ast
from pathlib import Path

import dspy
import pytest

from dspy_hero.fields import (
    ENVIRONMENT_FIELDS,
    LABEL_FIELDS,
    LOCATOR_FIELDS,
    PYTHON_TASK_FIELDS,
    REFERENCE_PROGRAM_FIELDS,
    environment_fields,
    environment_kind,
    get_field,
    group_of,
    is_locator,
    label_inputs,
    language_of,
    program_text,
    read_unlabeled,
    reference_program,
)

ROOT = Path(__file__).resolve().parents[1]


class Obj:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def test_get_field_reads_examples_dicts_and_objects_by_name_only():
    ex = dspy.Example(question="q", db_path="/x.db", empty="").with_inputs("question")
    for carrier in (ex, {"question": "q", "db_path": "/x.db", "empty": ""}, Obj(question="q", db_path="/x.db", empty="")):
        assert get_field(carrier, "question") == "q" and get_field(carrier, "db_path") == "/x.db"
        assert get_field(carrier, "missing") is None and get_field(carrier, "missing", "d") == "d"
        assert get_field(carrier, "empty") == ""  # an empty value is a value, not absent
    assert get_field(None, "question", 3) == 3
    assert get_field("db_path is a string", "db_path") is None  # `in` on a str is a substring test: not a field
    # an Example's attribute fallback (its methods) is never read as a field
    assert get_field(ex, "inputs") is None and get_field(ex, "copy") is None


def test_read_unlabeled_refuses_every_label_and_reads_the_rest():
    ex = {name: "SECRET" for name in LABEL_FIELDS} | {"question": "q"}
    for name in LABEL_FIELDS:
        with pytest.raises(ValueError, match=f"HERO-T never reads label field '{name}'"):
            read_unlabeled(ex, name, "HERO-T")
    assert read_unlabeled(ex, "question") == "q"
    assert set(REFERENCE_PROGRAM_FIELDS) <= set(LABEL_FIELDS)


def test_label_inputs_names_the_labels_marked_as_inputs():
    ex = dspy.Example(question="q", gold_sql="S", test_code="T").with_inputs("question", "gold_sql")
    assert label_inputs(ex) == ["gold_sql"] and label_inputs({"gold_sql": "S"}) == []


def test_environment_dispatch_reads_only_environment_fields():
    assert environment_kind({"db_path": "/x.db", "graph": "g"}) == "sql"
    assert environment_kind(Obj(graph="g")) == "cypher"
    assert environment_kind(dspy.Example(entry_point="f")) == "python"
    assert environment_kind({"gold_sql": "SELECT 1", "question": "q"}) is None  # labels never dispatch
    assert environment_kind({"db_path": ""}) is None
    refs = environment_fields({"db_path": "/x.db", "question": "q", "gold_sql": "S", "prompt": "p"})
    assert refs == {"db_path": "/x.db", "prompt": "p"}
    assert ENVIRONMENT_FIELDS == LOCATOR_FIELDS + PYTHON_TASK_FIELDS
    assert all(is_locator(n) for n in LOCATOR_FIELDS) and not any(is_locator(n) for n in PYTHON_TASK_FIELDS)


def test_group_of_names_the_database_or_graph():
    assert group_of({"db_id": "concert", "graph": "g", "db_path": "/x.db"}) == "concert"
    assert group_of(dspy.Example(graph="films")) == "films" and group_of({"db_path": "/x.db"}) == ""


def test_reference_program_per_language():
    ex = dspy.Example(question="q", gold_sql="SELECT 1", canonical_solution="def f(): pass")
    assert reference_program(ex, "sql") == "SELECT 1" and reference_program(ex, "python") == "def f(): pass"
    assert reference_program(ex, "cypher") is None and reference_program({"ground_truth_code": ""}, "python") is None


def test_language_and_program_from_outputs():
    assert language_of({"graph": "g"}, {"sql": "x"}) == "cypher"
    assert language_of({}, {"reasoning": "r", "code": "x"}) == "python"
    assert language_of(None, None) is None
    assert program_text({"reasoning": "r", "cypher": "MATCH (n) RETURN n"}, "cypher") == "MATCH (n) RETURN n"
    assert program_text({"raw_output": "junk"}, "sql") == "junk" and program_text({}, "sql") == ""


# --- one contract: nobody else lists the fields ---------------------------------------------------

CONTRACT_NAMES = frozenset(LABEL_FIELDS + LOCATOR_FIELDS)


def field_lists(tree: ast.Module) -> list[tuple[int, list[str]]]:
    """Module- and class-level constants (literal tuples, lists, sets, dicts) naming two or more label
    or locator fields, one of them a label: a second copy of the contract. A metric's call
    ``require_fields(example, ("gold_sql", "db_path"), ...)`` states what it needs, and is not one."""
    statements = [n for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))]
    statements += [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body
                   if isinstance(n, (ast.Assign, ast.AnnAssign))]
    found = []
    for node in (inner for s in statements if s.value is not None for inner in ast.walk(s.value)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None] + list(node.values)
        else:
            continue
        names = [e.value for e in items if isinstance(e, ast.Constant) and e.value in CONTRACT_NAMES]
        if len(names) >= 2 and any(n in LABEL_FIELDS for n in names):
            found.append((node.lineno, names))
    return found


def test_only_the_contract_module_lists_label_fields():
    offenders = {}
    for path in sorted((ROOT / "dspy_hero").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "dspy_hero/fields.py":
            continue
        lists = field_lists(ast.parse(path.read_text(encoding="utf-8")))
        if lists:
            offenders[rel] = lists
    assert offenders == {}


def test_the_list_finder_can_fail():
    tree = ast.parse('_NOT_SEARCHED = frozenset(("gold_sql", "db_path"))\nX = {"gold_cypher": 1, "test_code": 2}\n'
                     'Y = ("db_path", "db_id")\nclass C:\n    Z = {"sql": "gold_sql", "cypher": "gold_cypher"}\n'
                     'def f(ex):\n    require_fields(ex, ("gold_sql", "db_path"), "m")\n')
    assert [names for _, names in field_lists(tree)] == [
        ["gold_sql", "db_path"], ["gold_cypher", "test_code"], ["gold_sql", "gold_cypher"]]
