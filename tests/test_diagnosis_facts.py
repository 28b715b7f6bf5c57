"""Counting failure categories across cases, and the one-line rendering of a diagnosis."""

from __future__ import annotations

import json

from dspy_hero.diagnosis import Category, Diagnosis, Fact, count_categories


def diag(*cats: Category) -> Diagnosis:
    return Diagnosis("sql", tuple(Fact(c, f"{c.value} fact {i}") for i, c in enumerate(cats)))


def test_counts_each_case_once_per_category_most_frequent_first():
    counts = count_categories([
        ("F1", diag(Category.COLUMN_NOT_IN_TABLE, Category.COLUMN_NOT_IN_TABLE, Category.EMPTY_RESULT)),
        ("F2", diag(Category.EMPTY_RESULT)),
        ("F3", diag(Category.EMPTY_RESULT, Category.UNLINKED_JOIN)),
        ("F4", diag(Category.COLUMN_NOT_IN_TABLE)),
        ("F5", diag()),
    ])
    assert [(c.category, c.count, c.case_ids) for c in counts] == [
        (Category.EMPTY_RESULT, 3, ("F1", "F2", "F3")),
        (Category.COLUMN_NOT_IN_TABLE, 2, ("F1", "F4")),
        (Category.UNLINKED_JOIN, 1, ("F3",)),
    ]
    # ties rank by the enum's order (specific schema facts before result shapes), whatever the input order
    tie = count_categories([diag(Category.EMPTY_RESULT), diag(Category.COLUMN_NOT_IN_TABLE)])
    assert [c.category for c in tie] == [Category.COLUMN_NOT_IN_TABLE, Category.EMPTY_RESULT]
    assert [c.case_ids for c in tie] == [("2",), ("1",)]


def test_count_line_states_the_pattern_in_words():
    (cc,) = count_categories([("F1", diag(Category.COLUMN_NOT_IN_TABLE)), ("F3", diag(Category.COLUMN_NOT_IN_TABLE))])
    assert cc.line(5) == ("- 2 of 5 failing case(s): a column is taken from a table that does not have it "
                          "[column not in its table] (F1, F3)")


def test_line_and_label_free_view():
    d = Diagnosis("sql", (Fact(Category.REF_EXTRA_TABLE, "ref"), Fact(Category.EMPTY_RESULT, "empty"),
                          Fact(Category.NULL_COLUMN, "a"), Fact(Category.DUPLICATE_ROWS, "b"), Fact(Category.WRONG_VALUES, "c")))
    assert d.line(max_facts=2) == "ref; empty; (+3 more)"
    free = d.label_free_only()
    assert [f.category for f in free.facts] == [Category.EMPTY_RESULT, Category.NULL_COLUMN, Category.DUPLICATE_ROWS,
                                                Category.WRONG_VALUES]
    assert Diagnosis("sql", (), "", ("no schema",)).line() == "(no diagnosis: no schema)"
    assert all(c.describe() for c in Category) and {c for c in Category if c.from_reference} == {
        c for c in Category if c.name.startswith("REF_")}
    assert d.to_dict()["facts"][0] == {"category": "table the reference does not use", "text": "ref"}
    again = Diagnosis.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again == d and again.line() == d.line()
