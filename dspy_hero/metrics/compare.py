"""Result comparators of the official harnesses, as pure functions over rows.

* `bird_equal` — BIRD EX: ``set(pred) == set(gold)``; order and duplicates ignored, column order matters.
* `result_eq` — Spider / CypherBench EX: two empty results are equal; otherwise row and column counts
  must match, columns may be permuted, rows are compared as a multiset, and row order matters only
  when the caller says so (the gold query has ORDER BY, see `has_order_by`).

Both comparators first pass every cell through `normalize_cell` (in `dspy_hero.text`), so results from different engines
(SQLite floats, Neo4j lists and temporal values, Python dicts) compare on content. The official
Spider and BIRD scripts compare raw values; normalizing only merges values that differ by float noise
(``0.1 + 0.2`` vs ``0.3``), by list order inside a cell (what CypherBench does) or by representation
(a ``date`` vs its ISO string), which is what a reader of the benchmark would call "the same answer".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

# Cell normalization is a floor-0 utility (executors normalize cells too); re-exported here.
from dspy_hero.text import NAN, normalize_cell

__all__ = ["NAN", "bird_equal", "has_order_by", "normalize_cell", "normalize_rows", "result_eq"]


def normalize_rows(rows: Iterable[Sequence[Any]] | None) -> list[tuple]:
    """Rows as a list of tuples of normalized cells (None → no rows)."""
    if rows is None:
        return []
    return [tuple(normalize_cell(c) for c in row) for row in rows]


def bird_equal(pred_rows: Iterable[Sequence[Any]] | None, gold_rows: Iterable[Sequence[Any]] | None) -> bool:
    """BIRD execution accuracy: the two results hold the same set of rows (columns in order)."""
    return set(normalize_rows(pred_rows)) == set(normalize_rows(gold_rows))


def result_eq(
    pred_rows: Iterable[Sequence[Any]] | None,
    gold_rows: Iterable[Sequence[Any]] | None,
    order_matters: bool,
) -> bool:
    """Spider / CypherBench execution accuracy.

    Equal when both are empty; otherwise the row counts and column counts must agree and some
    permutation of the prediction's columns must make the rows equal as a multiset (as a sequence
    when `order_matters`). The permutation search only pairs columns holding the same multiset of
    values and checks each partial assignment, so it stays fast on wide results with repeated values.
    """
    pred = normalize_rows(pred_rows)
    gold = normalize_rows(gold_rows)
    if not pred and not gold:
        return True
    if len(pred) != len(gold):
        return False
    ncol = len(gold[0])
    if any(len(r) != ncol for r in gold) or any(len(r) != ncol for r in pred):
        return False
    if ncol == 0:
        return True
    if not order_matters and Counter(pred) == Counter(gold):
        return True  # the identity permutation: the common case, checked without a search
    if order_matters and pred == gold:
        return True

    gold_cols = [[r[i] for r in gold] for i in range(ncol)]
    pred_cols = [[r[j] for r in pred] for j in range(ncol)]
    gold_bags = [Counter(c) for c in gold_cols]
    candidates: list[list[int]] = []
    for j in range(ncol):
        bag = Counter(pred_cols[j])
        options = [i for i in range(ncol) if gold_bags[i] == bag]
        if not options:
            return False
        candidates.append(options)

    # Assign the most constrained prediction columns first.
    order = sorted(range(ncol), key=lambda j: len(candidates[j]))
    used = [False] * ncol
    chosen: list[tuple[int, int]] = []  # (pred column, gold column)

    def consistent() -> bool:
        pj = [p for p, _ in chosen]
        gi = [g for _, g in chosen]
        p_proj = [tuple(r[j] for j in pj) for r in pred]
        g_proj = [tuple(r[i] for i in gi) for r in gold]
        return p_proj == g_proj if order_matters else Counter(p_proj) == Counter(g_proj)

    def search(depth: int) -> bool:
        if depth == ncol:
            return True
        j = order[depth]
        for i in candidates[j]:
            if used[i]:
                continue
            used[i] = True
            chosen.append((j, i))
            if consistent() and search(depth + 1):
                return True
            chosen.pop()
            used[i] = False
        return False

    return search(0)


_STRINGS = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`")
_COMMENTS = re.compile(r"--[^\n]*|/\*.*?\*/|//[^\n]*", re.DOTALL)
_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def _top_level(text: str) -> str:
    """The text outside any (), [] or {} nesting."""
    out, depth = [], 0
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def has_order_by(query: str) -> bool:
    """Whether the outermost query orders its rows, i.e. whether row order is part of the answer.

    SQL is parsed with sqlglot (SQLite dialect) and the ORDER BY of the top-level query (a SELECT or a
    set operation) decides. Text sqlglot cannot parse (Cypher, odd dialects) falls back to a scan for
    ORDER BY outside strings, comments and brackets. An ORDER BY only inside a subquery does not
    count, because the outer query may reorder those rows. (The original Spider script checks for the
    substring anywhere; the outermost rule differs only for queries ordering inside a subquery.)
    """
    if not query or not query.strip():
        return False
    try:
        import sqlglot
        from sqlglot import exp

        parsed = sqlglot.parse(query, read="sqlite")
        statements = [p for p in parsed if p is not None]
        if len(statements) == 1 and isinstance(statements[0], exp.Query):
            return statements[0].args.get("order") is not None
    except Exception:  # noqa: BLE001, S110 - sqlglot failing on odd text is expected: use the scan below
        pass
    text = _COMMENTS.sub(" ", _STRINGS.sub("''", query))
    return bool(_ORDER_BY.search(_top_level(text)))


def describe_difference(pred_rows, gold_rows, pred_columns: int, gold_columns: int, *, order_matters: bool,
                        set_semantics: bool = False) -> str:
    """Which observable property of two differing results differs (columns, rows, order, values),
    without saying what the expected value is: the wording metric feedback may show a reflector.
    `set_semantics` is BIRD's comparison (distinct rows, order ignored)."""
    p_rows, g_rows = normalize_rows(pred_rows), normalize_rows(gold_rows)
    p_cols = len(p_rows[0]) if p_rows else pred_columns
    g_cols = len(g_rows[0]) if g_rows else gold_columns
    if set_semantics:
        p_set, g_set = set(p_rows), set(g_rows)
        if p_cols != g_cols and p_set and g_set:
            return "different number of columns"
        if len(p_set) != len(g_set):
            return "different number of distinct rows"
        return "different values (or column order)"
    if p_rows and g_rows and p_cols != g_cols:
        return "different number of columns"
    if len(p_rows) != len(g_rows):
        return "different number of rows"
    if order_matters and result_eq(p_rows, g_rows, order_matters=False):
        return "same rows but in a different order, and the order matters"
    return "different values"
