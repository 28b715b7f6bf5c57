"""Unit tests of HERO-O's decision objects: instructions, budget, pools, evidence, reflection parsing,
guard, selection, metric adapter (acceptance: test_acceptance.py)."""

from __future__ import annotations

import dspy
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dspy_hero.optimizer.archive import AdaptiveSelector, ArchiveEntry
from dspy_hero.optimizer.budget import Budget, gepa_auto_budget, plan_round, resolve_budget, rounds_for_budget
from dspy_hero.optimizer.evidence import Case, DefaultEvidenceRenderer
from dspy_hero.optimizer.guard import MemorizationGuard
from dspy_hero.optimizer.instructions import (
    RULES_HEADER,
    PromptState,
    RuleEdit,
    apply_edit,
    parse_instructions,
    render_instructions,
)
from dspy_hero.optimizer.pools import DefaultPoolSplitter
from dspy_hero.optimizer.reflection import parse_edits
from dspy_hero.metrics.base import MetricAdapter, MetricError, normalize_metric_output


# ---- instructions -------------------------------------------------------------------------------
def test_seed_is_kept_verbatim_and_rules_round_trip():
    seed = "Write one SQLite query.\nReturn only SQL."
    text = render_instructions(seed, ("Use COUNT(*) for counts.", "Qualify columns."))
    assert text.startswith(seed + "\n\n" + RULES_HEADER)
    state = parse_instructions(text)
    assert state == PromptState(seed, ("Use COUNT(*) for counts.", "Qualify columns."))
    assert render_instructions(seed, ()) == seed


def test_apply_edit_add_replace_delete_and_limits():
    rules = ("a b c", "d e f")
    assert apply_edit(rules, RuleEdit("add", "g h i"), 12, 300) == ("a b c", "d e f", "g h i")
    assert apply_edit(rules, RuleEdit("replace", "x y z", 2), 12, 300) == ("a b c", "x y z")
    assert apply_edit(rules, RuleEdit("delete", "", 1), 12, 300) == ("d e f",)
    assert isinstance(apply_edit(rules, RuleEdit("delete", "", 5), 12, 300), str)
    assert isinstance(apply_edit(rules, RuleEdit("add", "A  B c"), 12, 300), str)  # duplicate
    assert isinstance(apply_edit(rules, RuleEdit("add", "x" * 301), 12, 300), str)
    assert isinstance(apply_edit(rules, RuleEdit("add", "new rule here"), 2, 300), str)


# ---- budget -------------------------------------------------------------------------------------
@pytest.mark.parametrize("auto", ["light", "medium", "heavy"])
@pytest.mark.parametrize("n_train,n_val", [(10, None), (40, 15), (300, None)])
def test_auto_budget_equals_dspy_gepa(auto, n_train, n_val, monkeypatch):
    """The budget dspy.GEPA.compile computes (captured from its call to gepa.optimize)."""
    import gepa

    from dspy_hero.tasks.programs import GenerateProgram

    captured = {}

    class Stop(Exception):
        pass

    def fake_optimize(**kwargs):
        captured["calls"] = kwargs["max_metric_calls"]
        raise Stop

    monkeypatch.setattr(gepa, "optimize", fake_optimize)
    ex = lambda i: dspy.Example(question=f"q{i}", gold_sql="SELECT 1").with_inputs("question")
    train = [ex(i) for i in range(n_train)]
    val = [ex(i) for i in range(n_val)] if n_val else None
    metric = lambda g, p, t=None, pn=None, pt=None: 0.0
    g = dspy.GEPA(metric, auto=auto, reflection_lm=dspy.LM("openai/none"))
    with pytest.raises(Stop):
        g.compile(GenerateProgram("sql", ["question"]), trainset=train, valset=val)
    ours = resolve_budget(auto=auto, max_full_evals=None, max_metric_calls=None, num_predictors=1,
                          trainset_size=n_train, valset_size=n_val)
    assert ours == captured["calls"]


def test_budget_settings_resolution():
    assert resolve_budget(auto=None, max_full_evals=None, max_metric_calls=None, num_predictors=2,
                          trainset_size=20, valset_size=None) == gepa_auto_budget("light", 2, 20, None)
    assert resolve_budget(auto=None, max_full_evals=3, max_metric_calls=None, num_predictors=1,
                          trainset_size=20, valset_size=5) == 75
    with pytest.raises(ValueError, match="at most one"):
        resolve_budget(auto="light", max_full_evals=None, max_metric_calls=10, num_predictors=1,
                       trainset_size=5, valset_size=None)
    with pytest.raises(ValueError):
        gepa_auto_budget("extreme", 1, 10, None)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(0, 60), asks=st.lists(st.integers(0, 25), max_size=30))
def test_budget_take_never_exceeds(total, asks):
    b = Budget(total)
    granted = 0
    for n in asks:
        g = b.take(n)
        assert 0 <= g <= n
        granted += g
        assert b.spent == granted <= total
    assert plan_round(b.remaining, 3, 0) * 3 <= b.remaining


def test_diagnosis_leaves_room_for_an_acceptance_test_when_rounds_are_tight():
    from dspy_hero.optimizer.hero import diagnosis_limit

    assert diagnosis_limit(100, 8) == 50  # ample: half the round
    assert diagnosis_limit(32, 8) == 16  # half still leaves 8 pairs
    assert diagnosis_limit(23, 8) == 7  # tight: 16 calls kept for the acceptance test
    assert diagnosis_limit(12, 8) == 4  # very tight: at least a third
    assert diagnosis_limit(0, 8) == 0


def test_small_budgets_fund_fewer_rounds():
    # 80 calls, 16 kept for selection: 64 fund two rounds of >= 24 calls, not five of 12.
    assert rounds_for_budget(5, 80, 16, 24) == 2
    assert rounds_for_budget(5, 600, 120, 24) == 5
    assert rounds_for_budget(5, 10, 2, 24) == 1  # never zero rounds when T > 0
    assert rounds_for_budget(5, 80, 16, 0) == 5  # 0 keeps the paper's T
    assert rounds_for_budget(0, 600, 0, 24) == 0


# ---- pools --------------------------------------------------------------------------------------
def _items(n, groups=None):
    exs = []
    for i in range(n):
        e = dspy.Example(question=f"q{i}", db_id=f"db{i % groups}" if groups else "x").with_inputs("question")
        exs.append((f"t{i}", e))
    return exs


def test_pools_are_disjoint_deterministic_and_cover_the_data():
    s = DefaultPoolSplitter()
    a, b = s.split(_items(50), None, seed=3), s.split(_items(50), None, seed=3)
    assert a == b
    d, u, sel = set(a.diagnosis), set(a.update), set(a.selection)
    assert d and u and sel and not (d & u) and not (d & sel) and not (u & sel)
    assert d | u | sel == {f"t{i}" for i in range(50)}
    assert s.split(_items(50), None, seed=4).diagnosis != a.diagnosis


def test_grouped_pools_keep_each_group_in_one_pool():
    items = _items(60, groups=10)
    pools = DefaultPoolSplitter(group_key="db_id").split(items, None, seed=0)
    group_of = {i: ex.db_id for i, ex in items}
    sets = [set(pools.diagnosis), set(pools.update), set(pools.selection)]
    assert all(sets) and not (sets[0] & sets[1]) and not (sets[1] & sets[2]) and not (sets[0] & sets[2])
    groups = [{group_of[i] for i in s} for s in sets]
    assert not (groups[0] & groups[1]) and not (groups[0] & groups[2]) and not (groups[1] & groups[2])


def test_small_data_reuses_update_pool_for_selection_and_says_so():
    pools = DefaultPoolSplitter().split(_items(4), None, seed=0)
    assert pools.selection_reuses_update and pools.selection == pools.update
    assert not set(pools.diagnosis) & set(pools.update)
    assert any("reuses the update pool" in n for n in pools.notes)
    with pytest.raises(ValueError, match="at least 2"):
        DefaultPoolSplitter().split(_items(1), None, seed=0)


def test_valset_is_the_selection_pool():
    val = [(f"v{i}", ex) for i, (_, ex) in enumerate(_items(5))]
    pools = DefaultPoolSplitter().split(_items(20), val, seed=0)
    assert pools.selection == [f"v{i}" for i in range(5)] and pools.selection_is_valset
    assert len(pools.diagnosis) + len(pools.update) == 20


# ---- evidence -----------------------------------------------------------------------------------
def _case(cid, passed, text="x"):
    return Case(cid, cid.lower(), passed, float(passed), {"question": text}, {"sql": "SELECT 1"}, "fb")


def test_evidence_renderer_balances_and_respects_token_budget():
    cases = [_case(f"F{i}", False, "q " * 50) for i in range(1, 33)] + [_case(f"P{i}", True, "q " * 50) for i in range(1, 33)]
    text, shown = DefaultEvidenceRenderer(token_budget=600).render(cases)
    assert len(text) / 4 <= 600 + 10
    f = [c for c in shown if c.startswith("F")]
    p = [c for c in shown if c.startswith("P")]
    assert f and p and abs(len(f) - len(p)) <= 1 and shown[:2] == ["F1", "P1"]
    _, shown_all = DefaultEvidenceRenderer(token_budget=10**6).render(cases)
    assert len(shown_all) == 64
    long = [_case("F1", False, "word " * 1000)]
    text, _ = DefaultEvidenceRenderer(max_field_chars=100).render(long)
    assert len(text) < 400


# ---- reflection parsing -------------------------------------------------------------------------
def test_parse_edits_accepts_small_model_formats_and_drops_uncited():
    text = """Here are the edits:
1. ADD: Use COUNT(*) when the question asks how many (F1, F3)
2) **Replace rule 1 with: Qualify every column with its table (cases F2)**
- DELETE 2 (F4)
* Prefer explicit JOIN conditions on keys — F5, F6.
- Always double-check the query
- ADD: Use window functions where ranking is asked (P1)"""
    edits = parse_edits(text, {"F1", "F2", "F3", "F4", "F5", "F6"})
    ok = [e for e in edits if e.problem is None]
    assert [(e.op, e.index) for e in ok] == [("add", None), ("replace", 1), ("delete", 2), ("add", None)]
    assert ok[0].rule == "Use COUNT(*) when the question asks how many" and ok[0].cites == ["F1", "F3"]
    assert ok[1].rule == "Qualify every column with its table"
    assert ok[3].rule == "Prefer explicit JOIN conditions on keys"
    dropped = [e for e in edits if e.problem]
    assert len(dropped) == 2 and all("cites no failing case" in e.problem for e in dropped)
    js = parse_edits('{"edits": [{"op": "add", "rule": "Use SUM for totals always", "cases": ["F2"]}]}', {"F2"})
    assert js[0].rule == "Use SUM for totals always" and js[0].problem is None
    assert parse_edits("I cannot help with that.", {"F1"})[0].problem
    assert parse_edits("", {"F1"}) == []


# ---- guard --------------------------------------------------------------------------------------
def test_guard_blocks_labels_literals_and_copied_spans_but_allows_general_rules():
    case = Case("F1", "t1", False, 0.0,
                {"question": "How many singers from France are older than thirty in the whole concert database?"},
                {"sql": "SELECT name FROM singer"}, "wrong",
                labels={"gold_sql": "SELECT COUNT(*) FROM singer WHERE country = 'France' AND age > 30"})
    g = MemorizationGuard()
    seed = "Write one SQLite query."
    assert g.check("Use COUNT(*) when the question asks how many.", seed, [case]).allowed
    assert not g.check("Answer with select count(*)  from singer where country = 'france' and age > 30", seed, [case]).allowed
    v = g.check("Filter singers by country = 'France'.", seed, [case])
    assert not v.allowed and "France" in v.reason
    assert not g.check("Compare ages with 30 when asked.", seed, [case]).allowed
    v = g.check("When singers are older than thirty in the whole concert database, use count", seed, [case])
    assert not v.allowed and "copies" in v.reason


# ---- acceptance: see tests/test_acceptance.py ------------------------------------------------


# ---- selection ----------------------------------------------------------------------------------
def test_selector_picks_best_and_breaks_ties_by_acceptance_evidence_then_length():
    entries = [ArchiveEntry("seed", 0, {"p": "s"}, 10), ArchiveEntry("a", 1, {"p": "a"}, 20), ArchiveEntry("b", 2, {"p": "b"}, 30)]
    quality = {0: 0.2, 1: 0.9, 2: 0.5}
    scores = lambda i, ids: {x: float((int(x[1:]) % 10) < quality[i] * 10) for x in ids}
    out = AdaptiveSelector(chunk=8).select(entries, [f"s{i}" for i in range(40)], scores)
    assert out.winner == 1 and entries[1].selected
    tie = [ArchiveEntry("seed", 0, {"p": "s"}, 10), ArchiveEntry("a", 1, {"p": "a"}, 20)]
    out = AdaptiveSelector().select(tie, [f"s{i}" for i in range(8)], lambda i, ids: {x: 1.0 for x in ids})
    assert out.winner == 1  # the adopted prompt won its paired acceptance; the tied selection pool cannot overrule it
    same_round = [ArchiveEntry("a", 1, {"p": "a"}, 20), ArchiveEntry("b", 1, {"p": "b"}, 12)]
    out = AdaptiveSelector().select(same_round, [f"s{i}" for i in range(8)], lambda i, ids: {x: 0.5 for x in ids})
    assert out.winner == 1  # then the shorter prompt


# ---- metric adapter -----------------------------------------------------------------------------
def test_metric_adapter_arities_and_return_types():
    gold, pred = dspy.Example(a=1), dspy.Prediction(b=2)
    assert MetricAdapter(lambda g, p: True)(gold, pred) == (1.0, None)
    assert MetricAdapter(lambda g, p, t=None: 0.5)(gold, pred) == (0.5, None)
    five = MetricAdapter(lambda g, p, t, n, pt: dspy.Prediction(score=1.0, feedback="ok"))
    assert five.arity == 5 and five(gold, pred) == (1.0, "ok")
    assert MetricAdapter(lambda g, p: {"score": 0, "feedback": "no"})(gold, pred) == (0.0, "no")
    with pytest.raises(MetricError, match=r"\[0, 1\]"):
        normalize_metric_output(100.0)
    with pytest.raises(MetricError):
        normalize_metric_output("yes")
    with pytest.raises(MetricError):
        MetricAdapter(lambda: 1.0)


def test_parse_edits_drops_programs_and_copied_templates_small_models_produce():
    text = """ADD: SELECT * FROM table_name WHERE condition1 AND condition2 (F1, F2)
ADD: MATCH (n:Person) RETURN n (F1)
ADD: def solve(x): return x (F1)
ADD: When <situation>, <what to do>. (F1)
ADD: When the question asks how many, return COUNT(*) instead of rows. (F1)
ADD: Select only the columns the question asks for (F2)
ADD: When <country> = 'USA', SELECT * FROM singers WHERE country = 'USA' (F1)
ADD: Use SELECT COUNT(*) FROM the table when counting and never list rows (F2)"""
    edits = parse_edits(text, {"F1", "F2"})
    assert [e.problem is None for e in edits] == [False, False, False, False, True, True, False, True]
    assert "program fragment" in edits[0].problem and "placeholder" in edits[3].problem


def _sql_case(cid, question, gold, program="SELECT 1"):
    return Case(cid, cid.lower(), False, 0.0, {"question": question}, {"sql": program}, "wrong",
                labels={"gold_sql": gold})


def test_guard_lets_general_sql_through():
    """The rules a SQL task needs quote format strings, small numbers and SQL keywords of the golds."""
    cases = [
        _sql_case("F1", "How many pets were born in 2015?", "SELECT COUNT(*) FROM pets WHERE strftime('%Y', birth) = '2015'"),
        _sql_case("F2", "List the top 10 students by grade.", "SELECT name FROM student ORDER BY grade DESC LIMIT 10"),
        _sql_case("F3", "How many different pet types are there?", "SELECT COUNT(DISTINCT pet_type) FROM pets"),
    ]
    g, seed = MemorizationGuard(), "Write one SQLite query."
    for rule in ("When comparing years of a date column, use strftime('%Y', column).",
                 "For top-10 questions, ORDER BY the measure DESC and LIMIT 10.",
                 "When asked how many different values there are, use COUNT(DISTINCT column).",
                 "When the question asks for the first 3 rows, use LIMIT 3."):
        v = g.check(rule, seed, cases)
        assert v.allowed, (rule, v.reason)


def test_guard_blocks_one_instances_values_but_not_values_many_instances_share():
    dog = _sql_case("F1", "How many dogs are older than 3?", "SELECT COUNT(*) FROM pets WHERE pet_type = 'dog' AND age > 3")
    cat = _sql_case("F2", "What is the weight of the heaviest cat?", "SELECT MAX(weight) FROM pets WHERE pet_type = 'cat'")
    g, seed = MemorizationGuard(), "Write one SQLite query."
    for rule in ("When pet_type = 'dog', filter the pets table by it.", "When asked about pets, use pet_type = dog.",
                 "When the question mentions 2015, use '2015' as the year."):
        cases = [dog, cat, _sql_case("F3", "How many pets in 2015?", "SELECT COUNT(*) FROM pets WHERE year = 2015")]
        assert not g.check(rule, seed, cases).allowed, rule
    v = g.check("Filter by pet_type = 'cat' for cat questions.", seed, [dog, cat])
    assert not v.allowed and "'cat'" in v.reason
    # the same value in two shown instances is a pattern of the task, not one instance's answer
    cat2 = _sql_case("F3", "How many cats are there?", "SELECT COUNT(*) FROM pets WHERE pet_type = 'cat'")
    assert g.check("Filter by pet_type = 'cat' for cat questions.", seed, [dog, cat, cat2]).allowed


def test_guard_lets_a_condition_over_a_column_through_but_not_a_value_in_it():
    """A rule may name the condition its kind of column needs (`deleted_at IS NULL`, `is_sample = 0`), as the
    per-pattern prompt's worked example teaches, even when one shown reference has it: it is code over a
    name, not an answer (soft-deletion demo, session 9). A value inside the backticks is still a value."""
    soft = _sql_case("F1", "How many books are in the Poetry category?",
                     "SELECT COUNT(*) FROM books b WHERE b.category = 'Poetry' AND b.deleted_at IS NULL")
    other = _sql_case("F2", "How many oils are in the Virgin category?",
                      "SELECT COUNT(*) FROM oils o WHERE o.category = 'Virgin' AND o.archived_on IS NULL")
    g, seed = MemorizationGuard(), "Write one SQLite query."
    for rule in ("When a table has a column that flags deleted rows (such as deleted_at), those rows do not count: "
                 "always add the condition `deleted_at IS NULL` to the WHERE clause.",
                 "When a table has a column such as is_sample, always add the condition `is_sample = 0`.",
                 "When a table has a column that flags deleted rows (such as deleted_at or archived_on), those rows do not "
                 "count: always add the condition `<that column> IS NULL` to the WHERE clause."):
        v = g.check(rule, seed, [soft, other])
        assert v.allowed, (rule, v.reason)
    for rule in ("For these questions always add the condition `category = 'Poetry'` to the WHERE clause.",
                 "Always add the condition `category = Poetry`.",  # unquoted, but copied from one label
                 "When the question names `Poetry`, filter on it."):
        assert not g.check(rule, seed, [soft, other]).allowed, rule
