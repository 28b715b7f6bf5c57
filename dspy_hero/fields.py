"""The example-field contract: which fields an example carries, who may read which, and the one reader.

Tasks, metrics, environments, HERO-O, HERO-T, the diagnosis and the demo bank all read examples by
field name; this module is the only place those names are listed. It sits on floor 0 (standard
library only) because the execution layer dispatches on the same fields the metrics read.

=========  =======================================================  ================
language   example fields (inputs first, then labels)               prediction field
=========  =======================================================  ================
SQL        question, [db_schema], [evidence], db_id, db_path |       ``sql``
           gold_sql
Cypher     question, [graph_schema], graph (a graph name), [graph_   ``cypher``
           source (a file or mapping the engine loads)] |
           gold_cypher
Python     prompt, [code_prompt], entry_point | test_code            ``code``
           (unit tests, BigCodeBench semantics) or
           prompt, [code_prompt] | ground_truth_code, test_script
           (output comparison, DSCodeBench semantics)
=========  =======================================================  ================

Three kinds of field:

- **Task inputs** (question, db_schema, prompt, ...): what a program generator reads.
- **Environment fields** (`ENVIRONMENT_FIELDS`): what an execution environment needs. The
  `LOCATOR_FIELDS` (db_path, db_id, graph, graph_source, engine) only locate a database, graph or
  engine: they are never shown to a reflector as task text. The `PYTHON_TASK_FIELDS` (prompt,
  code_prompt, entry_point) are needed by the Python sandbox and are task text as well. Environment
  fields need not be marked as inputs: metrics and environments read them from the whole example, and
  HERO-O, HERO-T and `evaluate_program` pass a program any of them it names (`metrics.base.program_inputs`).
- **Labels** (`LABEL_FIELDS`): reference programs and tests. They must not be marked as inputs: DSPy
  programs never see them and HERO-T never reads them (`read_unlabeled` refuses them). Only metrics
  and the demo bank, which is built from training data, read them, through `get_field`.

The prediction field is the language's default (`PREDICTION_FIELDS`); every metric factory takes
``prediction_field=`` for a program whose output is named otherwise.

`get_field` is the one reader of a field: it reads a `dspy.Example`, a dict or any object by name and
never iterates over an example's keys, so a label stored on an example is touched only when asked for
by name.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ENVIRONMENT_FIELDS", "GROUP_FIELDS", "LABEL_FIELDS", "LANGUAGE_OF_OUTPUT", "LOCATOR_FIELDS", "PREDICTION_FIELDS",
    "PYTHON_TASK_FIELDS", "REFERENCE_PROGRAM_FIELDS", "environment_fields", "environment_kind", "get_field",
    "group_of", "is_locator", "label_inputs", "language_of", "program_text", "read_unlabeled", "reference_program",
]

PREDICTION_FIELDS = {"sql": "sql", "cypher": "cypher", "python": "code"}
LANGUAGE_OF_OUTPUT = {field: language for language, field in PREDICTION_FIELDS.items()}

# Labels: never LM inputs, never read by HERO-T. canonical_solution is BigCodeBench's reference program.
LABEL_FIELDS = ("gold_sql", "gold_cypher", "test_code", "ground_truth_code", "test_script", "canonical_solution")
# The labels that hold a reference program, with its language, in the order the demo bank tries them.
REFERENCE_PROGRAM_FIELDS = {"gold_sql": "sql", "gold_cypher": "cypher", "ground_truth_code": "python",
                            "canonical_solution": "python"}

# Fields that only locate an environment (a database file, a graph, an engine): never task text.
LOCATOR_FIELDS = ("db_path", "db_id", "graph", "graph_source", "engine")
# Fields the Python sandbox needs; unlike the locators they are also task text worth showing.
PYTHON_TASK_FIELDS = ("prompt", "code_prompt", "entry_point")
# Everything an environment may read; a program that names one receives it even when it is not an input.
ENVIRONMENT_FIELDS = LOCATOR_FIELDS + PYTHON_TASK_FIELDS
# The locators that name the database or graph an instance belongs to (instances sharing one share
# its schema: demos prefer the same group, evidence shows a group's context once).
GROUP_FIELDS = ("db_id", "graph")


def get_field(obj: Any, name: str, default: Any = None) -> Any:
    """One named field of a `dspy.Example`, a dict or any object; `default` when absent or None.

    Never raises and reads nothing but `name`. A mapping-like object (a dict, a `dspy.Example` or
    `dspy.Prediction`) is read by key only, so its attributes (``inputs``, ``copy``, ...) never pass
    for fields; any other object by attribute. A string has no fields."""
    if obj is None or isinstance(obj, (str, bytes)):
        return default
    if isinstance(obj, dict):
        value = obj.get(name)
    elif hasattr(type(obj), "__contains__") and hasattr(type(obj), "__getitem__"):
        try:
            value = obj[name] if name in obj else None
        except Exception:
            value = None
    else:
        value = getattr(obj, name, None)
    return default if value is None else value


def read_unlabeled(obj: Any, name: str, reader: str = "this reader") -> Any:
    """`get_field` for readers that must stay label-free (HERO-T, the diagnosis, the evidence).

    Raises ValueError for a label name: asking for one is a bug in the caller, not a missing value.
    `reader` names the caller in that message."""
    if name in LABEL_FIELDS:
        raise ValueError(f"{reader} never reads label field {name!r}; pass a reference explicitly")
    return get_field(obj, name)


def group_of(obj: Any) -> str:
    """The database or graph an instance belongs to (its first `GROUP_FIELDS` value), else ""."""
    return next((str(value) for name in GROUP_FIELDS if (value := get_field(obj, name))), "")


def is_locator(name: str) -> bool:
    """True for fields that only locate an environment and are never shown as case inputs."""
    return name in LOCATOR_FIELDS


def environment_fields(obj: Any) -> dict[str, Any]:
    """The environment fields present on `obj`, raw (a graph source may be a mapping)."""
    return {name: value for name in ENVIRONMENT_FIELDS if (value := get_field(obj, name)) is not None}


def environment_kind(obj: Any) -> str | None:
    """'sql', 'cypher', 'python' or None, from which environment fields are set (never from labels)."""
    if get_field(obj, "db_path"):
        return "sql"
    if get_field(obj, "graph"):
        return "cypher"
    if any(get_field(obj, name) for name in PYTHON_TASK_FIELDS):
        return "python"
    return None


def language_of(fields: Any = None, outputs: Any = None) -> str | None:
    """'sql' | 'cypher' | 'python' from the environment fields, else from the output field names."""
    kind = environment_kind(fields) if fields is not None else None
    if kind is not None:
        return kind
    for name in outputs or {}:
        if name in LANGUAGE_OF_OUTPUT:
            return LANGUAGE_OF_OUTPUT[name]
    return None


def program_text(outputs: dict[str, Any], language: str | None) -> str:
    """The program among a call's outputs: its language's prediction field, else the first program-like
    output (sql, cypher, code, raw_output), else ""."""
    if language in PREDICTION_FIELDS and outputs.get(PREDICTION_FIELDS[language]) is not None:
        return str(outputs[PREDICTION_FIELDS[language]])
    for name in ("sql", "cypher", "code", "raw_output"):
        if outputs.get(name) is not None:
            return str(outputs[name])
    return ""


def reference_program(obj: Any, language: str | None) -> str | None:
    """A TRAINING example's reference program in `language`: the first of `REFERENCE_PROGRAM_FIELDS`
    of that language it carries, else None. Reads labels, so only code that may see training labels
    (the demo bank, HERO-O's opt-in ``training_references``) calls it."""
    for name, lang in REFERENCE_PROGRAM_FIELDS.items():
        if lang == language and (value := get_field(obj, name)):
            return str(value)
    return None


def label_inputs(example: Any) -> list[str]:
    """The label fields an example marks as inputs (they would reach the program and the reflector)."""
    try:
        keys = example.inputs().keys()
    except Exception:
        return []
    return [k for k in keys if k in LABEL_FIELDS]
