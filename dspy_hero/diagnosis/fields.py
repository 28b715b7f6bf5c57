"""The one reader of case fields the diagnosis and the evidence use: which fields are environment
references, which language a case is in, and which output holds its program.

Why one reader: the evidence renderer, the per-case reflection prompt and the diagnosis each used to
list `db_path` / `graph_source` by hand, and each list drifted (a Cypher case's graph source or a
Python case's entry point was shown to the reflector as if it were a question). Labels are never read
here: `read` refuses them.
"""

from __future__ import annotations

from typing import Any

from dspy_hero.execution.environments import environment_kind
from dspy_hero.metrics.base import LABEL_FIELDS, PREDICTION_FIELDS, get_field

# Fields that locate an environment (a database file, a graph, an engine). They are not part of what
# a reflector must read: the schema text a program generator sees is a separate input (db_schema, ...).
ENVIRONMENT_REFERENCES = ("db_path", "db_id", "graph", "graph_source", "engine")
# Fields the Python environment needs; unlike the above they are also task text worth showing.
PYTHON_ENVIRONMENT_FIELDS = ("prompt", "code_prompt", "entry_point")
LANGUAGE_OF_FIELD = {v: k for k, v in PREDICTION_FIELDS.items()}


def read(obj: Any, name: str) -> Any:
    """One named field of a dict, `dspy.Example` or object (None when absent); refuses label names."""
    if name in LABEL_FIELDS:
        raise ValueError(f"the diagnosis never reads label field {name!r}; pass a reference explicitly")
    return get_field(obj, name)


def environment_fields(obj: Any) -> dict[str, Any]:
    """The environment references present on `obj` (raw values: a graph source may be a mapping)."""
    out = {}
    for name in ENVIRONMENT_REFERENCES + PYTHON_ENVIRONMENT_FIELDS:
        value = read(obj, name)
        if value is not None:
            out[name] = value
    return out


def is_environment_reference(name: str) -> bool:
    """True for fields that only locate an environment and are never shown as case inputs."""
    return name in ENVIRONMENT_REFERENCES


def language_of(fields: Any = None, outputs: Any = None) -> str | None:
    """'sql' | 'cypher' | 'python' from the environment references, else from the output field names."""
    kind = environment_kind(fields) if fields is not None else None
    if kind is not None:
        return kind
    for name in (outputs or {}):
        if name in LANGUAGE_OF_FIELD:
            return LANGUAGE_OF_FIELD[name]
    return None


def program_text(outputs: dict[str, Any], language: str | None) -> str:
    """The program a case produced: its language's prediction field, else the raw output."""
    if language in PREDICTION_FIELDS and outputs.get(PREDICTION_FIELDS[language]) is not None:
        return str(outputs[PREDICTION_FIELDS[language]])
    for name in ("sql", "cypher", "code", "raw_output"):
        if outputs.get(name) is not None:
            return str(outputs[name])
    return ""
