"""The records every diagnosis returns: typed facts, one diagnosis per failed case, counted categories.

Why typed categories and not free text: the evidence shown to a reflector starts with "7 of 9 failing
cases: a column is taken from a table that does not have it (F1, F2, ...)". A category is what is
counted across cases, so it must be an enum; the one-line `text` is what is shown for one case and
may name the case's own tables, columns, labels or exception.

`label_free` separates what a diagnosis may say at test time (what the program did, what the
environment says, result shapes, the metric's own feedback) from what only a TRAINING case's
reference program can say (its structural diff). Reference facts exist only when a caller passes a
reference explicitly; HERO-T never does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Category(str, Enum):
    """A kind of failure, stated so that a rule can be written against it (value: a short name;
    `describe()`: the sentence a reflector reads)."""

    # SQL: the schema against the query
    UNKNOWN_TABLE = "unknown table"
    COLUMN_NOT_IN_TABLE = "column not in its table"
    COLUMN_FROM_UNJOINED_TABLE = "column of a table not in FROM"
    UNKNOWN_COLUMN = "unknown column"
    AMBIGUOUS_COLUMN = "ambiguous column"
    UNLINKED_JOIN = "join without a key condition"
    JOIN_NOT_ON_KEY = "join not on a foreign key"
    UNUSED_TABLE = "joined table not used"
    AGGREGATE_WITHOUT_GROUP_BY = "aggregate mixed with plain columns"
    TEXT_COMPARED_WITH_NUMBER = "text compared with a number"
    # Cypher: the graph against the query
    UNKNOWN_LABEL = "unknown node label"
    UNKNOWN_RELATIONSHIP = "unknown relationship type"
    UNKNOWN_PROPERTY = "unknown property"
    WRONG_DIRECTION = "reversed relationship"
    WRONG_ENDPOINTS = "relationship between the wrong labels"
    # Python: the program against its own prompt
    LOAD_ERROR = "program fails to load"
    MISSING_ENTRY_POINT = "entry point not defined"
    EXAMPLE_RAISES = "visible example raises"
    EXAMPLE_OUTPUT_DIFFERS = "visible example output differs"
    TESTS_FAILED = "hidden tests failed"
    # run failures (any language)
    EMPTY_PROGRAM = "no program"
    SYNTAX_ERROR = "syntax error"
    TIMEOUT = "timeout"
    RESOURCE_LIMIT = "resource limit"
    REJECTED = "rejected statement"
    RUNTIME_ERROR = "runtime error"
    ENVIRONMENT_ERROR = "environment error"
    # result shapes (any language), after the specific kinds so that ties rank the specific first
    EMPTY_RESULT = "empty result"
    NULL_COLUMN = "NULL-only column"
    DUPLICATE_ROWS = "duplicate rows"
    TRUNCATED_RESULT = "result too large"
    WRONG_COLUMN_COUNT = "wrong number of columns"
    WRONG_ROW_COUNT = "wrong number of rows"
    WRONG_ORDER = "wrong row order"
    WRONG_VALUES = "wrong values"
    # TRAINING references only (training_references=True): the prediction against the reference program
    REF_MISSING_TABLE = "reference uses another table"
    REF_EXTRA_TABLE = "table the reference does not use"
    REF_COLUMN_COUNT = "column count differs from the reference"
    REF_AGGREGATE = "aggregate differs from the reference"
    REF_DISTINCT = "DISTINCT differs from the reference"
    REF_GROUP_BY = "GROUP BY differs from the reference"
    REF_ORDER_LIMIT = "ORDER BY/LIMIT differs from the reference"
    REF_FILTER = "filter differs from the reference"
    REF_EXTRA_FILTER = "condition the reference does not have"
    REF_COLUMN_FORM = "column read differently from the reference"
    REF_COMPARED_VALUE = "column compared with other values than the reference"
    REF_PATTERN = "graph pattern differs from the reference"

    def describe(self) -> str:
        return _DESCRIPTIONS[self]

    @property
    def from_reference(self) -> bool:
        return self.name.startswith("REF_")

    @property
    def symptom(self) -> bool:
        """Says only that the result is wrong (its shape, its values, the tests), not what in the program
        made it so: a rule written against a symptom alone is "check the filter" (what the 1.5B
        reflector wrote on Spider from "wrong values", tested 0:0 on 32 pairs)."""
        return self in _SYMPTOMS


_SYMPTOMS = frozenset({
    Category.EMPTY_RESULT, Category.NULL_COLUMN, Category.DUPLICATE_ROWS, Category.TRUNCATED_RESULT,
    Category.WRONG_COLUMN_COUNT, Category.WRONG_ROW_COUNT, Category.WRONG_ORDER, Category.WRONG_VALUES,
    Category.TESTS_FAILED,
})

_DESCRIPTIONS: dict[Category, str] = {
    Category.EMPTY_PROGRAM: "the answer contains no program",
    Category.SYNTAX_ERROR: "the program does not parse",
    Category.TIMEOUT: "the program runs past the time limit",
    Category.RESOURCE_LIMIT: "the program exceeds a memory or output limit",
    Category.REJECTED: "the program does something the executor forbids (a write, a second statement)",
    Category.RUNTIME_ERROR: "the program raises an error while running",
    Category.ENVIRONMENT_ERROR: "the environment itself failed (not the program's fault)",
    Category.EMPTY_RESULT: "the program runs but returns no rows",
    Category.NULL_COLUMN: "a returned column holds only NULL values",
    Category.DUPLICATE_ROWS: "the result repeats rows",
    Category.TRUNCATED_RESULT: "the result is larger than the row cap",
    Category.WRONG_COLUMN_COUNT: "the program returns a different number of columns than asked for",
    Category.WRONG_ROW_COUNT: "the program returns a different number of rows than asked for",
    Category.WRONG_ORDER: "the rows are right but in the wrong order",
    Category.WRONG_VALUES: "the program returns the wrong values",
    Category.UNKNOWN_TABLE: "the query names a table the database does not have",
    Category.COLUMN_NOT_IN_TABLE: "a column is taken from a table that does not have it",
    Category.COLUMN_FROM_UNJOINED_TABLE: "a column belongs to a table the query does not join",
    Category.UNKNOWN_COLUMN: "the query names a column no table has",
    Category.AMBIGUOUS_COLUMN: "an unqualified column exists in several joined tables",
    Category.UNLINKED_JOIN: "tables are joined without a condition linking them (a cross product)",
    Category.JOIN_NOT_ON_KEY: "tables are joined on columns that are not their foreign-key link",
    Category.UNUSED_TABLE: "a joined table contributes no column, filter or key",
    Category.AGGREGATE_WITHOUT_GROUP_BY: "an aggregate is selected next to plain columns without GROUP BY",
    Category.TEXT_COMPARED_WITH_NUMBER: "a text value (strftime, substr) is compared with a number, which SQLite "
                                        "never finds equal, so the condition's outcome is fixed",
    Category.UNKNOWN_LABEL: "the query names a node label the graph does not have",
    Category.UNKNOWN_RELATIONSHIP: "the query names a relationship type the graph does not have",
    Category.UNKNOWN_PROPERTY: "the query reads a property the label or relationship does not have",
    Category.WRONG_DIRECTION: "a relationship is traversed against its direction in the graph",
    Category.WRONG_ENDPOINTS: "a relationship type is used between labels it never connects",
    Category.LOAD_ERROR: "the program raises before any example runs (import, syntax or top-level code)",
    Category.MISSING_ENTRY_POINT: "the program does not define the function the task asks for",
    Category.EXAMPLE_RAISES: "an example shown in the prompt raises an exception",
    Category.EXAMPLE_OUTPUT_DIFFERS: "an example shown in the prompt prints something other than the prompt shows",
    Category.TESTS_FAILED: "the program runs but fails the task's tests",
    Category.REF_MISSING_TABLE: "the correct (reference) program uses a table the generated one does not",
    Category.REF_EXTRA_TABLE: "the generated program uses a table the correct (reference) one does not",
    Category.REF_COLUMN_COUNT: "the generated program selects a different number of columns than the correct one",
    Category.REF_AGGREGATE: "the generated program aggregates differently from the correct one",
    Category.REF_DISTINCT: "the generated program's DISTINCT differs from the correct one's",
    Category.REF_GROUP_BY: "the generated program's GROUP BY differs from the correct one's",
    Category.REF_ORDER_LIMIT: "the generated program's ORDER BY / LIMIT differs from the correct one's",
    Category.REF_FILTER: "the correct (reference) program has a condition on a column that the generated one does not "
                         "filter on",
    Category.REF_EXTRA_FILTER: "the generated program adds a condition on a column that the correct (reference) program "
                               "does not filter on",
    Category.REF_COLUMN_FORM: "the correct (reference) program converts a column's stored value (scales it, parses "
                              "it) where the generated one uses it as stored",
    Category.REF_COMPARED_VALUE: "the generated program compares a column with other values than the correct one "
                                 "(the stored spelling differs)",
    Category.REF_PATTERN: "the prediction's graph pattern differs from the reference's",
}


@dataclass(frozen=True)
class Fact:
    """One observable thing about a failed case: its category and a one-line text naming the case's own
    tables, columns, labels or exception (e.g. "column `name` is not in `singer_in_concert`; tables
    that have it: `singer`, `stadium`")."""

    category: Category
    text: str

    @property
    def label_free(self) -> bool:
        return not self.category.from_reference

    def to_dict(self) -> dict[str, str]:
        return {"category": self.category.value, "text": self.text}


@dataclass(frozen=True)
class Diagnosis:
    """Everything a diagnosis found about one program run, most specific fact first.

    `structure` is a label-free one-line summary of the program (for SQL: tables, joins, selected
    columns, aggregates, DISTINCT, GROUP BY, ORDER BY/LIMIT) shown next to the facts. `errors` says
    what the diagnosis itself could not do (an environment it could not open): never silent.
    """

    language: str
    facts: tuple[Fact, ...] = ()
    structure: str = ""
    errors: tuple[str, ...] = ()

    @property
    def categories(self) -> tuple[Category, ...]:
        """Distinct categories in fact order."""
        return tuple(dict.fromkeys(f.category for f in self.facts))

    @property
    def primary(self) -> Category | None:
        return self.facts[0].category if self.facts else None

    def label_free_only(self) -> Diagnosis:
        """The same diagnosis without facts that came from a reference program."""
        return Diagnosis(self.language, tuple(f for f in self.facts if f.label_free), self.structure, self.errors)

    def line(self, max_facts: int = 4, max_chars: int = 400) -> str:
        """One line for a case block: the facts joined by '; ' (the first `max_facts`)."""
        parts = [f.text for f in self.facts[:max_facts]]
        if len(self.facts) > max_facts:
            parts.append(f"(+{len(self.facts) - max_facts} more)")
        if not parts and self.errors:
            parts = [f"(no diagnosis: {self.errors[0]})"]
        text = "; ".join(parts) or "(no programmatic finding)"
        return text if len(text) <= max_chars else text[: max_chars - 2] + " …"

    def to_dict(self) -> dict[str, Any]:
        return {"language": self.language, "facts": [f.to_dict() for f in self.facts],
                "structure": self.structure, "errors": list(self.errors)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnosis:
        """The inverse of `to_dict` (a journal replays a round's diagnoses instead of re-running
        programs whose output may vary, so a resumed run renders the same evidence)."""
        by_value = {c.value: c for c in Category}
        facts = tuple(Fact(by_value[f["category"]], f["text"]) for f in data.get("facts", ()))
        return cls(data["language"], facts, data.get("structure", ""), tuple(data.get("errors", ())))


@dataclass(frozen=True)
class CategoryCount:
    """How many diagnosed cases show one category, and which (case ids in the order given)."""

    category: Category
    count: int
    case_ids: tuple[str, ...] = field(default_factory=tuple)

    def line(self, total: int, max_ids: int = 8) -> str:
        ids = ", ".join(self.case_ids[:max_ids]) + (", ..." if len(self.case_ids) > max_ids else "")
        return f"- {self.count} of {total} failing case(s): {self.category.describe()} [{self.category.value}]" + (
            f" ({ids})" if ids else "")


def count_categories(
    diagnoses: Sequence[Diagnosis] | Iterable[tuple[str, Diagnosis]],
) -> list[CategoryCount]:
    """Counted categories across cases, most frequent first (ties: the enum's order, so the output is
    deterministic). Each case counts once per category however many facts of it it has.

    Accepts plain diagnoses or (case_id, diagnosis) pairs; with plain ones the ids are "1", "2", ...
    """
    items = [d if isinstance(d, tuple) else (str(i + 1), d) for i, d in enumerate(diagnoses)]
    ids: dict[Category, list[str]] = {}
    for case_id, diag in items:
        for cat in diag.categories:
            ids.setdefault(cat, []).append(case_id)
    order = {cat: i for i, cat in enumerate(Category)}
    ranked = sorted(ids.items(), key=lambda kv: (-len(kv[1]), order[kv[0]]))
    return [CategoryCount(cat, len(case_ids), tuple(case_ids)) for cat, case_ids in ranked]
