"""Property tests of the result comparators against brute-force references (issue 7)."""

from __future__ import annotations

import datetime as dt
import itertools
import math
import random
import time
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from dspy_hero.metrics.compare import NAN, bird_equal, has_order_by, normalize_cell, result_eq

# Cells whose normalized form is themselves, so the references can compare raw values.
CELL = st.sampled_from([0, 1, 2, 7, "a", "b", "", None, 0.5, -3.25])


def ref_result_eq(pred, gold, order_matters):
    """Spider's definition, literally: try every column permutation."""
    if not pred and not gold:
        return True
    if len(pred) != len(gold):
        return False
    ncol = len(gold[0])
    if len(pred[0]) != ncol:
        return False
    for perm in itertools.permutations(range(ncol)):
        permuted = [tuple(row[k] for k in perm) for row in pred]
        if order_matters and permuted == list(gold):
            return True
        if not order_matters and Counter(permuted) == Counter(gold):
            return True
    return False


def ref_bird(pred, gold):
    return set(pred) == set(gold)


@st.composite
def table(draw, ncol=None, min_rows=0):
    ncol = ncol if ncol is not None else draw(st.integers(1, 4))
    nrows = draw(st.integers(min_rows, 6))
    return [tuple(draw(CELL) for _ in range(ncol)) for _ in range(nrows)]


@st.composite
def related_pair(draw):
    """A gold table and a prediction that is often a transformed copy of it (so both outcomes occur)."""
    gold = draw(table())
    ncol = len(gold[0]) if gold else draw(st.integers(1, 4))
    how = draw(st.sampled_from(["independent", "permute", "permute+mutate", "duplicate", "drop", "same"]))
    if how == "independent" or not gold:
        return draw(table(ncol=ncol)), gold
    perm = draw(st.permutations(range(ncol)))
    rows = [tuple(r[k] for k in perm) for r in gold] if how != "same" else list(gold)
    if draw(st.booleans()):
        rows = draw(st.permutations(rows))
    rows = list(rows)
    if how == "permute+mutate":
        i, j = draw(st.integers(0, len(rows) - 1)), draw(st.integers(0, ncol - 1))
        row = list(rows[i])
        row[j] = draw(CELL)
        rows[i] = tuple(row)
    elif how == "duplicate":
        rows.append(rows[draw(st.integers(0, len(rows) - 1))])
    elif how == "drop":
        rows.pop(draw(st.integers(0, len(rows) - 1)))
    return rows, gold


@settings(max_examples=400, deadline=None)
@given(related_pair(), st.booleans())
def test_result_eq_matches_brute_force(pair, order_matters):
    pred, gold = pair
    assert result_eq(pred, gold, order_matters) == ref_result_eq(pred, gold, order_matters)


@settings(max_examples=300, deadline=None)
@given(related_pair())
def test_bird_equal_matches_set_reference(pair):
    pred, gold = pair
    assert bird_equal(pred, gold) == ref_bird(pred, gold)


@settings(max_examples=200, deadline=None)
@given(related_pair(), st.booleans())
def test_result_eq_is_symmetric(pair, order_matters):
    pred, gold = pair
    assert result_eq(pred, gold, order_matters) == result_eq(gold, pred, order_matters)


@settings(max_examples=200, deadline=None)
@given(table(min_rows=1), st.data())
def test_column_permutation_and_row_shuffle_invariance(gold, data):
    ncol = len(gold[0])
    perm = data.draw(st.permutations(range(ncol)))
    shuffled = data.draw(st.permutations(gold))
    pred = [tuple(r[k] for k in perm) for r in shuffled]
    assert result_eq(pred, gold, order_matters=False)
    # with order: still equal when the rows keep their order
    assert result_eq([tuple(r[k] for k in perm) for r in gold], gold, order_matters=True)
    # BIRD keeps column order: equal iff the permutation leaves every row unchanged (as a set)
    assert bird_equal(pred, gold) == (set(pred) == set(gold))


@settings(max_examples=200, deadline=None)
@given(table(min_rows=2))
def test_order_matters_only_when_asked(gold):
    reversed_rows = list(reversed(gold))
    assert result_eq(reversed_rows, gold, order_matters=False)
    assert result_eq(reversed_rows, gold, order_matters=True) == ref_result_eq(reversed_rows, gold, True)


def test_spider_edge_cases():
    assert result_eq([], [], True)
    assert not result_eq([(1,)], [], False)
    assert not result_eq([], [(1,)], False)
    assert not result_eq([(1, 2)], [(1,)], False)  # column counts differ
    assert not result_eq([(1,), (1,), (2,)], [(1,), (2,), (2,)], False)  # multiset, not set
    assert bird_equal([(1,), (1,), (2,)], [(1,), (2,), (2,)])  # BIRD: set
    assert not bird_equal([(1, "a")], [("a", 1)])  # BIRD: column order matters
    assert result_eq([(1, "a")], [("a", 1)], True)  # Spider: columns may be permuted
    assert not result_eq([(1,), (2,)], [(2,), (1,)], True)
    assert result_eq([(1,), (2,)], [(2,), (1,)], False)


# --- normalization: NaN, floats, nested values, dates ---------------------------------------------

SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=5)
    | st.binary(max_size=4)
    | st.dates()
    | st.datetimes()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
)
NESTED = st.recursive(
    SCALAR,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.frozensets(st.integers(-5, 5), max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(NESTED)
def test_normalized_cells_are_hashable_and_idempotent(value):
    once = normalize_cell(value)
    hash(once)
    assert normalize_cell(once) == once
    assert bird_equal([(value,)], [(value,)])
    assert result_eq([(value, 1)], [(1, value)], order_matters=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(NESTED, max_size=5), st.randoms(use_true_random=False))
def test_list_order_inside_cells_is_ignored(items, rnd):
    shuffled = list(items)
    rnd.shuffle(shuffled)
    assert normalize_cell(items) == normalize_cell(shuffled)
    assert bird_equal([(items,)], [(shuffled,)])


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=4), NESTED, max_size=5), st.randoms(use_true_random=False))
def test_dict_order_is_ignored(mapping, rnd):
    keys = list(mapping)
    rnd.shuffle(keys)
    reordered = {k: mapping[k] for k in keys}
    assert normalize_cell(mapping) == normalize_cell(reordered)


@given(st.dates())
def test_dates_become_iso(d):
    assert normalize_cell(d) == d.isoformat()
    assert bird_equal([(d,)], [(d.isoformat(),)])


def test_datetimes_and_times_become_iso():
    assert normalize_cell(dt.datetime(2024, 5, 1, 12, 30)) == "2024-05-01T12:30:00"
    assert normalize_cell(dt.time(8, 15)) == "08:15:00"


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_float_rounding_is_tiny(x):
    y = normalize_cell(x)
    assert isinstance(y, float)
    assert math.isclose(x, y, rel_tol=1e-11, abs_tol=0.0) or x == y


def test_float_noise_is_ignored_but_real_differences_are_not():
    assert bird_equal([(0.1 + 0.2,)], [(0.3,)])
    assert result_eq([(sum([0.1] * 10),)], [(1.0,)], False)
    assert bird_equal([(1.0,)], [(1,)])
    assert bird_equal([(-0.0,)], [(0.0,)])
    assert not bird_equal([(0.3,)], [(0.3001,)])
    assert not bird_equal([(1e-9,)], [(2e-9,)])


def test_nan_equals_nan_only():
    nan = float("nan")
    assert normalize_cell(nan) is NAN and normalize_cell(float("-nan")) is NAN
    assert bird_equal([(nan, 1)], [(float("nan"), 1)])
    assert result_eq([(nan,), (1.0,)], [(1,), (nan,)], False)
    assert not bird_equal([(nan,)], [(None,)])
    assert not bird_equal([(nan,)], [(0.0,)])
    assert normalize_cell([nan, 1]) == normalize_cell([1, nan])


def test_wide_tables_with_repeated_values_stay_fast():
    rnd = random.Random(0)
    rows = [tuple(rnd.choice([0, 1]) for _ in range(12)) for _ in range(300)]
    permuted = [tuple(reversed(r)) for r in rows]
    broken = permuted[:-1] + [tuple(1 - v for v in permuted[-1])]
    start = time.perf_counter()
    assert result_eq(permuted, rows, False)
    assert not result_eq(broken, rows, False)
    same = [(1,) * 10] * 50
    assert result_eq(same, same, True)
    assert time.perf_counter() - start < 2.0


def test_has_order_by_outermost_only():
    assert has_order_by("SELECT a FROM t ORDER BY a")
    assert has_order_by("select a from t order by a desc limit 3;")
    assert has_order_by("SELECT a FROM t UNION SELECT b FROM u ORDER BY 1")
    assert has_order_by("WITH x AS (SELECT 1 AS a) SELECT a FROM x ORDER BY a")
    assert not has_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a) LIMIT 3")
    assert not has_order_by("SELECT a FROM t WHERE b = 'order by'")
    assert not has_order_by("SELECT a FROM t -- order by a")
    assert not has_order_by("")
    # Cypher (sqlglot cannot parse it): the regex fallback
    assert has_order_by("MATCH (n:Person) RETURN n.name ORDER BY n.name")
    assert not has_order_by("MATCH (n:Person {name: 'order by'}) RETURN n.name")
    assert not has_order_by("CALL { MATCH (n) RETURN n ORDER BY n.x } RETURN count(*)")
