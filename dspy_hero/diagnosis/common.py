"""Facts every language shares: how the run failed (by the executor's error type) and what shape its
result has (empty, NULL-only columns, repeated rows, cut at the row cap), plus the result property a
metric's feedback names ("different number of rows"), which is label-safe wording by contract."""

from __future__ import annotations

import re
from collections import Counter

from dspy_hero.diagnosis.facts import Category, Fact
from dspy_hero.execution.base import (
    EMPTY_PROGRAM,
    ENVIRONMENT,
    REJECTED,
    RESOURCE,
    SYNTAX,
    TIMEOUT,
    Execution,
)

_ERROR_CATEGORY = {
    EMPTY_PROGRAM: Category.EMPTY_PROGRAM,
    SYNTAX: Category.SYNTAX_ERROR,
    TIMEOUT: Category.TIMEOUT,
    RESOURCE: Category.RESOURCE_LIMIT,
    REJECTED: Category.REJECTED,
    ENVIRONMENT: Category.ENVIRONMENT_ERROR,
}

# The metric feedback phrases of dspy_hero.metrics.compare.describe_difference (and their BIRD forms).
_FEEDBACK_PROPERTY = (
    ("different number of columns", Category.WRONG_COLUMN_COUNT),
    ("different number of distinct rows", Category.WRONG_ROW_COUNT),
    ("different number of rows", Category.WRONG_ROW_COUNT),
    ("in a different order", Category.WRONG_ORDER),
    ("different values", Category.WRONG_VALUES),
)


def one_line(text: str, limit: int = 160) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[: limit - 2] + " …"


def error_category(execution: Execution) -> Category:
    return _ERROR_CATEGORY.get(execution.error_type or "", Category.RUNTIME_ERROR)


def error_fact(execution: Execution, where: str = "") -> Fact:
    """The executor's own account of a failed run, as one fact."""
    kind = execution.error_type or "Error"
    text = f"{kind}: {one_line(execution.error_message or '', 200)}".rstrip(": ")
    return Fact(error_category(execution), text + (f" ({where})" if where else ""))


def result_facts(execution: Execution, distinct: bool = False) -> list[Fact]:
    """Shape facts of a successful run with rows: empty, truncated, NULL-only columns, repeated rows.

    `distinct`: the program already asks for distinct rows (then repeats are impossible and not told).
    """
    if not execution.ok or execution.rows is None:
        return []
    if execution.truncated:
        return [Fact(Category.TRUNCATED_RESULT, f"the result was cut at the row cap ({execution.row_count} rows)")]
    rows = execution.rows
    if not rows:
        return [Fact(Category.EMPTY_RESULT, "the query returned no rows")]
    facts = []
    names = list(execution.columns or ()) or [f"column {i + 1}" for i in range(len(rows[0]))]
    nulls = [names[i] for i in range(min(len(names), len(rows[0]))) if all(r[i] is None for r in rows)]
    if nulls:
        shown = ", ".join(f"`{n}`" for n in nulls[:4])
        facts.append(Fact(Category.NULL_COLUMN, f"column(s) {shown} are NULL in all {len(rows)} returned row(s)"))
    if not distinct and not nulls and len(rows) > 1:  # NULL-only columns repeat rows by themselves
        repeats = sum(c - 1 for c in Counter(map(_hashable, rows)).values() if c > 1)
        if repeats:
            facts.append(Fact(Category.DUPLICATE_ROWS,
                              f"{repeats} of the {len(rows)} returned rows repeat an earlier row"))
    return facts


def feedback_property(feedback: str | None) -> Category | None:
    """Which result property the metric's feedback says is wrong (None when it names none)."""
    low = (feedback or "").lower()
    for phrase, category in _FEEDBACK_PROPERTY:
        if phrase in low:
            return category
    return None


def first_error_location(message: str) -> str:
    """'line L, column C' or 'near X' from an engine's error message, when it says."""
    m = re.search(r"line[: ]+(\d+)(?:[^\d]+(?:col(?:umn)?|offset)[: ]+(\d+))?", message or "", re.IGNORECASE)
    if m:
        return f"line {m.group(1)}" + (f", column {m.group(2)}" if m.group(2) else "")
    m = re.search(r"near \"?'?([^\"':]{1,40})", message or "")
    return f"near `{m.group(1).strip()}`" if m else ""


def _hashable(row: tuple) -> tuple:
    return tuple(repr(v) if isinstance(v, (list, dict, set)) else v for v in row)
