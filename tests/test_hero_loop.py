"""Loop-level mechanisms of HERO-O that must fail a test when they break: which pool decides what,
the selector's choice, failure_only, distinct candidates, the not-a-rule re-ask, temperature, auto
levels, run-level soundness in null and helpful-rule worlds, and metric-call accounting."""

from __future__ import annotations

import re

import dspy
import pytest
from optimizer_toy import (
    COUNT_RULE,
    NOOP_RULE,
    SUM_RULE,
    feedback_metric,
    make_examples,
    program,
    reflection_lm,
    task_lm,
)

from dspy_hero.bench.simulate import effect_world_lms, effect_world_task
from dspy_hero.bench.simulate_worlds import RuleEffect, RuleEffectWorld
from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.optimizer.acceptance import EvenShares, RankedShares, SignTestAcceptance
from dspy_hero.optimizer.archive import AdaptiveSelector, SelectionOutcome
from dspy_hero.optimizer.budget import Budget
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.result import CandidateStatus
from dspy_hero.metrics.base import MetricAdapter
from dspy_hero.optimizer.rollout import Rollouts, prefix_key
from dspy_hero.optimizer.settings import SEARCH_LEVELS, HeroSettings
from dspy_hero.tasks.programs import SEED_INSTRUCTIONS

SEED = SEED_INSTRUCTIONS["sql"]
HELPFUL = RuleEffect("When the question asks for a code, read it from the item number it names.", 0.20, 0.0)
HARMFUL = RuleEffect("When the question names an item, answer with the most common code instead.", 0.10, 0.20)


def compile_toy(rules, n=60, rl=None, **kw):
    kw.setdefault("max_metric_calls", 600)
    kw.setdefault("max_proposal_calls", 1)
    with dspy.context(lm=task_lm()):
        opt = HeroOptimizer(feedback_metric, reflection_lm=rl or reflection_lm(rules), display_progress=False, **kw)
        return opt.compile(program(), make_examples(n))


class RecordingSelector:
    """The default selector, recording the examples it is given; `force` overrides its choice."""

    def __init__(self, force=None):
        self.inner, self.force, self.orders = AdaptiveSelector(), force, []

    def select(self, entries, order, scores):
        self.orders.append(list(order))
        out = self.inner.select(entries, order, scores)
        if self.force is None:
            return out
        for e in entries:
            e.selected = False
        winner = self.force(len(entries))
        entries[winner].selected = True
        return SelectionOutcome(winner, out.compared_on, out.notes)


def test_acceptance_uses_only_update_pool_and_selection_only_selection_pool():
    sel = RecordingSelector()
    out = compile_toy([[COUNT_RULE], [SUM_RULE]], num_rounds=2, selector=sel)
    res = out.detailed_results
    pools = res.pools
    decided = [i for r in res.rounds for c in r.candidates if c.decision for i in c.decision.example_ids]
    assert decided and set(decided) <= set(pools["update"])
    assert not set(decided) & (set(pools["diagnosis"]) | set(pools["selection"]))
    assert sel.orders and all(set(o) <= set(pools["selection"]) for o in sel.orders)
    assert not set(pools["selection"]) & set(pools["update"])  # a real held-out pool at 60 examples
    diagnosed = [c["example_id"] for r in res.rounds for c in r.diagnosis_cases]
    assert diagnosed and set(diagnosed) <= set(pools["diagnosis"])


@pytest.mark.parametrize("pick", ["seed", "first"])
def test_the_selectors_choice_is_the_program_returned(pick):
    force = (lambda n: 0) if pick == "seed" else (lambda n: 1)
    out = compile_toy([[COUNT_RULE], [SUM_RULE]], num_rounds=2, selector=RecordingSelector(force))
    res = out.detailed_results
    assert len(res.archive) == 3  # both rules adopted
    chosen = res.archive[force(3)]
    assert out.generate.signature.instructions == chosen.instructions["generate"] == res.final_instructions["generate"]
    assert res.final_entry_id == chosen.entry_id


def test_failure_only_shows_no_passing_case():
    seen = []

    def reflect(req):
        if "evidence" in req.inputs:
            seen.append(req.inputs["evidence"])
            ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            return {"preserve": "- (none)", "revise": f"- counting ({', '.join(ids[:2])})"}
        cite = re.findall(r"\bF\d+\b", req.inputs.get("revise", "")) or ["F1"]
        return {"edits": f"ADD: {COUNT_RULE} ({cite[0]})"}

    out = compile_toy(None, rl=scripted_lm(reflect), num_rounds=1, failure_only=True)
    res = out.detailed_results
    assert seen and all("PASSED" not in e and "### Case P" not in e for e in seen)
    assert all(not c["passed"] for r in res.rounds for c in r.diagnosis_cases)
    assert COUNT_RULE in out.generate.signature.instructions
    seen.clear()
    compile_toy(None, rl=scripted_lm(reflect), num_rounds=1)  # the default does show passing cases
    assert any("PASSED" in e for e in seen)


def test_round_asks_again_until_it_has_k_distinct_new_candidates():
    """A reflector that repeats itself: later calls of the round are told what was proposed; the round
    tests only distinct candidates, never one already rejected against the prompt, and spends the
    budget on the new ideas the later calls bring."""
    proposals = [[NOOP_RULE], [NOOP_RULE], [COUNT_RULE], [NOOP_RULE, SUM_RULE]]
    rl = reflection_lm(proposals)
    out = compile_toy(None, rl=rl, num_rounds=1, num_candidates=3, max_proposal_calls=4)
    rnd = out.detailed_results.rounds[0]
    tested = [c for c in rnd.candidates if c.decision is not None]
    texts = [c.instructions for c in tested]
    assert len(texts) == len(set(texts)) == 3  # NOOP once, COUNT, SUM
    assert sum(c.status == "duplicate" for c in rnd.candidates) == 2
    edit_calls = [c for c in engine_of(rl).calls if "revise" in c.inputs]
    assert len(edit_calls) == 4
    assert "Already proposed in this round" in edit_calls[1].inputs["current_rules"]
    assert NOOP_RULE in edit_calls[1].inputs["current_rules"]
    assert rnd.adopted_candidate_id is not None


def test_reflection_calls_sample_at_temperature_with_distinct_rollout_ids():
    rl = reflection_lm([[COUNT_RULE], [NOOP_RULE], [SUM_RULE]])
    compile_toy(None, rl=rl, num_rounds=1, num_candidates=3, max_proposal_calls=3)
    kwargs = [h["kwargs"] for h in rl.history]
    assert kwargs and all(k.get("temperature") == 1.0 for k in kwargs)
    assert len({k.get("rollout_id") for k in kwargs}) == 3
    rl = reflection_lm([[COUNT_RULE]])
    compile_toy(None, rl=rl, num_rounds=1, reflection_temperature=0.0)
    assert all("temperature" not in h["kwargs"] for h in rl.history)


def test_code_answer_is_re_asked_once_with_the_reason_then_kept_or_dropped():
    asks = []

    def reflect(req):
        if "evidence" in req.inputs:
            ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            return {"preserve": "- (P1)", "revise": f"- counting ({ids[0]})"}
        if "failing_case" in req.inputs:
            return {"rule": ""}
        asks.append(req.inputs["current_rules"])
        cite = re.findall(r"\bF\d+\b", req.inputs.get("revise", ""))[0]
        if "not usable" in req.inputs["current_rules"]:
            return {"edits": f"ADD: {COUNT_RULE} ({cite})"}
        return {"edits": f"ADD: SELECT COUNT(*) FROM tbl1 ({cite})"}

    out = compile_toy(None, rl=scripted_lm(reflect), num_rounds=1)
    assert len(asks) == 2 and "a program fragment" in asks[1]
    assert COUNT_RULE in out.generate.signature.instructions
    dropped = [c for c in out.detailed_results.rounds[0].candidates if c.status is CandidateStatus.DROPPED]
    assert dropped and "not a rule" in dropped[0].reason


def test_a_rule_that_restates_the_error_or_copies_a_program_is_not_a_rule():
    from dspy_hero.optimizer.evidence import Case
    from dspy_hero.optimizer.reflection import not_a_rule

    case = Case("F1", "t1", False, 0.0, {"question": "q"}, {"code": "return sorted(items, key=len)[0]"},
                "Execution failed: no such column: singer.nam in the query", error="OperationalError: no such column")
    assert "restates" in not_a_rule("Execution failed: no such column: singer.nam in the query.", [case])
    assert "copies the program" in not_a_rule("Always return sorted(items, key=len)[0] for lists", [case])
    assert "program fragment" in not_a_rule("SELECT COUNT(*) FROM tbl1", [case])
    assert not_a_rule("When a column is not found, check which table has it before joining.", [case]) is None


def test_auto_levels_change_how_much_hero_o_searches():
    light, medium, heavy = (HeroSettings.resolve(auto=a) for a in ("light", "medium", "heavy"))
    assert (light.num_rounds, light.num_candidates, light.acceptance_max) == SEARCH_LEVELS["light"]
    assert light.num_rounds < medium.num_rounds < heavy.num_rounds
    assert light.num_candidates < medium.num_candidates < heavy.num_candidates
    assert HeroSettings.resolve(auto="medium", num_rounds=2).num_rounds == 2  # explicit settings win
    tested = {}
    for auto in ("light", "medium"):
        world = RuleEffectWorld(salt="auto", known=())
        examples, metric = effect_world_task(world, 60)
        task, reflect = effect_world_lms(world)
        student = dspy.Predict(dspy.Signature("question -> answer", "Answer with the item's code."))
        with dspy.context(lm=task):
            res = HeroOptimizer(metric, auto=auto, reflection_lm=reflect, num_threads=1,
                                display_progress=False).compile(student, examples).detailed_results
        tested[auto] = sum(c.decision is not None for r in res.rounds for c in r.candidates)
        assert res.total_metric_calls <= res.budget
    assert tested["medium"] > tested["light"]


def _world_run(known, seed):
    world = RuleEffectWorld(salt=f"{'helpful' if known else 'null'}{seed}", known=known)
    examples, metric = effect_world_task(world, 120)
    task, reflect = effect_world_lms(world)
    student = dspy.Predict(dspy.Signature("question -> answer", "Answer the question with the item's code."))
    with dspy.context(lm=task):
        out = HeroOptimizer(metric, auto="light", reflection_lm=reflect, seed=seed, num_threads=1,
                            display_progress=False).compile(student, examples)
    res = out.detailed_results
    rules = [line[2:] for line in out.signature.instructions.splitlines() if line.startswith("- ")]
    assert res.total_metric_calls <= res.budget
    return rules, res


def test_null_world_keeps_noise_in_at_most_one_of_eight_seeds():
    """Every proposed rule is noise (10% of answers flip each way): the loop's final program keeps a
    noise rule in at most 1 of 8 seeds (the old point-estimate rule: 7 of 8)."""
    kept = 0
    for seed in range(8):
        rules, res = _world_run((), seed)
        kept += bool(rules)
        assert sum(c.decision is not None for r in res.rounds for c in r.candidates) >= 12  # it did search
    assert kept <= 1


def test_helpful_world_adopts_the_twenty_point_rule_and_refuses_the_harmful_one():
    adopted = 0
    for seed in range(8):
        rules, res = _world_run((HELPFUL, HARMFUL), seed)
        adopted += HELPFUL.rule in rules
        assert HARMFUL.rule not in rules
        harmful = [c for r in res.rounds for c in r.candidates if c.edit == f"ADD: {HARMFUL.rule}" and c.decision]
        assert harmful and not any(c.decision.accepted for c in harmful)
        if HELPFUL.rule in rules:  # its held-out lineage is counted on the selection pool, next to in-sample
            row = next(r for r in res.lineage if r["final"])
            assert row["in_sample"]["fixes"] > 0 and row["cumulative_held_out"]["n"] == len(res.pools["selection"])
    assert adopted >= 7  # >= 80% of seeds


def test_counting_metric_around_a_multi_predictor_student_never_exceeds_the_budget():
    """A 5-argument metric on a two-predictor program: per-predictor feedback re-executes the metric;
    every execution is charged, so an outside counter never sees more than max_metric_calls."""
    from test_optimizer_loop import TwoStep

    calls = []

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        calls.append(pred_name)
        return feedback_metric(gold, pred, trace, pred_name, pred_trace)

    def script(req):
        if "plan" in req.output_fields:
            return {"plan": "count rows" if "count" in req.instructions.lower() else "select rows"}
        return {"sql": "SELECT 1"}

    for budget in (7, 60, 150):
        calls.clear()
        with dspy.context(lm=scripted_lm(script)):
            res = HeroOptimizer(metric, reflection_lm=reflection_lm([[COUNT_RULE]]), max_metric_calls=budget,
                                num_rounds=2, display_progress=False).compile(TwoStep(), make_examples(40)).detailed_results
        assert len(calls) <= budget
        assert len(calls) == res.total_metric_calls
        assert res.feedback_metric_calls == sum(c is not None for c in calls) > 0


def test_rollouts_run_grouped_by_shared_prefix_without_changing_results():
    examples = make_examples(12, groups=3)  # db0, db1, db2, db0, ...
    order = []

    def script(req):
        order.append(req.inputs.get("db_id"))
        return {"sql": "SELECT 1"}

    student = dspy.Predict(dspy.Signature("question, db_id -> sql", "Write SQL."))
    items = [(f"t{i}", ex) for i, ex in enumerate(examples)]
    got = {}
    for key in (prefix_key(None), None):
        order.clear()
        with dspy.context(lm=scripted_lm(script)):
            r = Rollouts(student, MetricAdapter(feedback_metric), Budget(12), display_progress=False, order_key=key)
            got[key is None] = {i: x.score for i, x in r.run("k", {}, items).items()}
        if key is not None:
            assert order == sorted(order)  # grouped: db0 x4, db1 x4, db2 x4
        else:
            assert order != sorted(order)
    assert got[True] == got[False] and len(got[True]) == 12


def test_harness_table_reports_in_sample_next_to_held_out_lineage():
    from dspy_hero.bench.methods import MethodResult
    from dspy_hero.bench.report import markdown

    out = compile_toy([[COUNT_RULE], [SUM_RULE]], num_rounds=2)
    d = out.detailed_results.to_dict()
    assert d["lineage"] and d["held_out_n"] == len(d["pools"]["selection"])
    assert d["held_out_fixes"] == d["lineage"][-1]["cumulative_held_out"]["fixes"] > 0
    seed = MethodResult("seed", "Seed", outcomes=[{"example_id": f"e{i}", "score": float(i % 2)} for i in range(6)])
    hero = MethodResult("hero_o", "HERO-O", outcomes=[{"example_id": f"e{i}", "score": 1.0} for i in range(6)], budget=600,
                        extras={k: d[k] for k in ("adopted_fixes", "adopted_breaks", "lineage", "held_out_pool",
                                                  "held_out_fixes", "held_out_breaks", "held_out_n")})
    meta = {"task": "toy", "sizes": {"train": 60, "val": 0, "test": 6}, "task_lm": "t", "reflection_lm": "r", "seed": 0,
            "budget": 600, "budget_source": "given"}
    text = markdown(meta, {"seed": seed, "hero_o": hero}, ["seed", "hero_o"])
    assert (f"held-out selection pool {d['held_out_fixes']}:{d['held_out_breaks']}" in text
            and "evaluation set 3:0" in text and "update r1c1 (round 1): in-sample" in text)


def test_adopter_takes_the_best_lower_bound_not_the_best_estimate():
    from dspy_hero.optimizer.acceptance import Decision
    from dspy_hero.optimizer.instructions import PromptState
    from dspy_hero.optimizer.result import CandidateRecord
    from dspy_hero.optimizer.strategies.adopter import LowerBoundAdopter
    from dspy_hero.optimizer.strategies.protocols import Candidate

    # decided on different sample sizes: the small sample's estimate is higher, its bound lower
    small = Decision("a", fixes=6, n=6, estimate=1.0, lower=0.2, accepted=True)
    large = Decision("b", fixes=24, breaks=4, n=48, estimate=0.42, lower=0.25, accepted=True)
    cands = []
    for d, rule in ((small, "rule a"), (large, "rule b")):
        rec = CandidateRecord(d.candidate_id, "edit", f"ADD: {rule}", "", decision=d)
        cands.append(Candidate(rec, PromptState("seed", (rule,))))
    assert LowerBoundAdopter(len).adopt(cands).record.candidate_id == "b"
    cands[1].record.decision.accepted = False  # only accepted candidates are adopted
    assert LowerBoundAdopter(len).adopt(cands).record.candidate_id == "a"


def test_a_short_round_gives_every_open_candidate_the_same_number_of_pairs():
    """Three undecided candidates and a round that cannot afford all their looks: the pairs are
    split evenly (the first candidate does not starve the others). detectable_fix_share=0 funds all three
    (by default this budget tests fewer candidates with more pairs each)."""
    noop = [NOOP_RULE, "Write SQL keywords in upper case for readability.", "Prefer short table aliases in queries."]
    out = compile_toy([noop], n=120, num_rounds=1, num_candidates=3, max_metric_calls=150, min_calls_per_round=0,
                      detectable_fix_share=0)
    tested = [c.decision for c in out.detailed_results.rounds[0].candidates if c.decision is not None]
    assert len(tested) == 3 and len({d.n for d in tested}) == 1 and tested[0].n >= 8
    assert all("budget ran out" in d.reason or "pool" in d.reason or "max size" in d.reason for d in tested)


def test_a_small_budget_tests_one_candidate_that_can_decide_instead_of_several_that_cannot():
    """100 calls, K=4: four candidates' fair shares (~12-20 pairs at alpha/(5*K)) cannot show a rule that
    fixes a third of the questions, so the round asks for and tests one, with the pairs to detect it;
    detectable_fix_share=0 (only two first looks required) splits the budget and rejects the same rule."""
    rules = [[COUNT_RULE, NOOP_RULE, "Write SQL keywords in upper case for readability.",
              "Prefer short table aliases in queries."]] * 5
    kw = {"n": 60, "num_candidates": 4, "max_metric_calls": 100, "max_proposal_calls": None}
    one_each = reflection_lm([[r] for r in rules[0]])  # one rule per proposal call
    compile_toy(None, rl=one_each, **kw)
    edit_calls = [c for c in engine_of(one_each).calls if "current_rules" in c.inputs and "evidence" not in c.inputs]
    assert len(edit_calls) == 1  # no reflection-LM time spent on candidates the round could not test well
    first = compile_toy(rules, **kw).detailed_results.rounds[0]
    tested = [c for c in first.candidates if c.decision is not None]
    assert len(tested) == 1 and tested[0].edit == f"ADD: {COUNT_RULE}" and tested[0].decision.accepted
    needed = SignTestAcceptance(alpha=0.1 / 5, max_size=64).pairs_to_detect(0.25)
    assert tested[0].decision.n >= needed == 24
    assert all(c.status is CandidateStatus.SKIPPED for c in first.candidates if c.decision is None)
    assert any("tests 1 of num_candidates=4" in n and "asking for 1" in n for n in first.notes)
    split = compile_toy(rules, detectable_fix_share=0, **kw).detailed_results
    tested = [c for c in split.rounds[0].candidates if c.decision is not None]
    assert len(tested) >= 2 and all(c.decision.n < needed for c in tested)
    assert split.final_entry_id == "seed" and not any(c.decision.accepted for c in tested)


class DecideOnly:
    """A user's acceptance rule with only the protocol's `decide` (no pairs_to_detect)."""

    def __init__(self):
        self.inner = SignTestAcceptance(max_size=64, alpha=0.02)

    def decide(self, candidate_id, order, pair_scores, *, family_size=1):
        return self.inner.decide(candidate_id, order, pair_scores, family_size=family_size)


class RecordingAcceptance:
    """The sound rule, recording each test's family size (1 / its share of the round's level)."""

    def __init__(self):
        self.inner, self.families = SignTestAcceptance(max_size=64, alpha=0.1), {}

    def pairs_to_detect(self, fix_share, *, family_size=1):
        return self.inner.pairs_to_detect(fix_share, family_size=family_size)

    def start(self, candidate_id, order, *, family_size=1):
        self.families[candidate_id] = family_size
        return self.inner.start(candidate_id, order, family_size=family_size)


@pytest.mark.parametrize("shares, want", [(None, [2, 4, 4]), (EvenShares(), [3, 3, 3]), (RankedShares(0.6), [1 / 0.6, 5, 5])])
def test_a_rounds_level_is_split_by_the_shares_in_proposal_order(shares, want):
    """The first, pattern-ranked candidate gets half of the round's level by default, the others the
    rest evenly; the shares follow the order the reflector proposed them in, and never sum above 1."""
    rec = RecordingAcceptance()
    rl = reflection_lm([[COUNT_RULE, SUM_RULE, NOOP_RULE]])
    res = compile_toy(None, rl=rl, num_rounds=1, num_candidates=3, detectable_fix_share=0, acceptance=rec,
                      level_shares=shares).detailed_results
    tested = [c for c in res.rounds[0].candidates if c.decision is not None]
    assert [c.edit for c in tested] == [f"ADD: {r}" for r in (COUNT_RULE, SUM_RULE, NOOP_RULE)]
    assert [rec.families[c.candidate_id] for c in tested] == pytest.approx(want)
    assert sum(1 / f for f in rec.families.values()) <= 1 + 1e-9
    assert [c.decision.level <= 0.1 / f + 1e-12 for c, f in zip(tested, want)] == [True] * 3


def test_a_round_funds_only_as_many_candidates_as_its_strictest_share_can_decide():
    """With four candidates the ranked split holds three of them to 1/6 of the round's level, where an
    even split holds each to 1/4; funding must size the tests for the strictest one, so at the same
    budget the ranked split funds fewer candidates (each with more pairs)."""
    rules = [COUNT_RULE, SUM_RULE, NOOP_RULE, "Write SQL keywords in upper case for readability."]
    kw = dict(n=160, num_rounds=1, num_candidates=4, max_metric_calls=225)
    tested = {}
    for name, shares in (("ranked", None), ("even", EvenShares())):
        res = compile_toy(None, rl=reflection_lm([rules] * 3), level_shares=shares, **kw).detailed_results
        tested[name] = [c.decision.n for c in res.rounds[0].candidates if c.decision is not None]
    assert len(tested["ranked"]) < len(tested["even"]) == 4, tested
    assert min(tested["ranked"]) > max(tested["even"])


class Overspending:
    def shares(self, k):
        return (0.5,) * k


def test_shares_that_would_break_the_false_adoption_bound_are_refused():
    with pytest.raises(ValueError, match="summing to at most 1"):
        compile_toy(None, rl=reflection_lm([[COUNT_RULE, SUM_RULE, NOOP_RULE]]), num_rounds=1, num_candidates=3,
                    detectable_fix_share=0, level_shares=Overspending())


def test_an_acceptance_rule_that_cannot_size_its_tests_is_funded_by_first_looks_and_says_so(caplog):
    rules = [[COUNT_RULE, NOOP_RULE, "Write SQL keywords in upper case for readability."]] * 5
    res = compile_toy(rules, n=60, num_candidates=3, max_metric_calls=100, acceptance=DecideOnly()).detailed_results
    assert any("has no pairs_to_detect()" in w for w in res.warnings)
    assert "has no pairs_to_detect()" in caplog.text
    assert sum(c.decision is not None for c in res.rounds[0].candidates) >= 2  # two first looks each, as before
    quiet = compile_toy(rules, n=60, num_candidates=3, max_metric_calls=100, acceptance=DecideOnly(),
                        detectable_fix_share=0).detailed_results
    assert not any("pairs_to_detect" in w for w in quiet.warnings)


def test_a_round_that_cannot_fund_a_first_look_asks_no_reflection():
    """When what a round has left cannot pay one candidate's first look (acceptance_initial pairs),
    HERO-O does not spend reflection-LM calls on candidates nothing could test (on Spider with the 1.5B
    reflector such a round cost minutes and tested nothing)."""
    rl = reflection_lm([[NOOP_RULE]] * 10)
    out = compile_toy(None, rl=rl, num_rounds=4, num_candidates=1, max_metric_calls=90, min_calls_per_round=0)
    rounds = out.detailed_results.rounds
    starved = [r for r in rounds if any("cannot fund one candidate's first look" in n for n in r.notes)]
    asked = [r for r in rounds if r.candidates]
    assert starved and asked, [(r.round, r.notes, len(r.candidates)) for r in rounds]
    assert all(not r.candidates and not r.gradient for r in starved)
    # the rounds that could fund a test did ask, and only they (2 calls: DiagnoseEvidence + ProposeRuleEdits)
    assert 2 * len(asked) <= len(engine_of(rl).calls) <= 2 * 4 * len(asked)


def test_a_copy_of_the_per_pattern_prompts_example_is_never_a_candidate():
    """Whichever prompt produced it, a rule that copies the per-pattern prompt's example is dropped
    by the builder (on Spider the evidence-wide fallback, told what the round had proposed, re-proposed
    the copy and it was tested)."""
    from dspy_hero.optimizer.reflection import not_a_rule

    copy = "When a table has a column that flags sample or demo rows (such as is_sample), always leave those rows out."
    assert not_a_rule(copy, []).startswith("not a rule: it copies")
    assert not_a_rule("When a table has a column that flags deleted rows, always leave those rows out.", []) is None
    borrowed = "When a table has a column that flags sample or demo rows (such as deleted_at), always leave those rows out."
    assert not_a_rule(borrowed, []) is None  # the example's wording, the evidence's column: a rule


def _seed_sensitive_reflector():
    """Greedy (no seed) it proposes COUNT_RULE citing no case (unusable); sampled at a seed, citing
    the failing cases. The same question asked twice at the LM's own seed gets the same unusable answer."""
    state = {"failing": []}

    def script(req):
        if "evidence" in req.inputs:
            state["failing"] = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            return {"preserve": "- (none)", "revise": f"- counting ({', '.join(state['failing'])})"}
        if "failure_pattern" in req.inputs:  # the per-pattern proposer: greedy, it answers with SQL
            return {"rule": COUNT_RULE if req.seed is not None else "SELECT COUNT(*) FROM t"}
        cite = f" ({', '.join(state['failing'][:3])})" if req.seed is not None else ""
        return {"edits": f"ADD: {COUNT_RULE}{cite}"}

    return scripted_lm(script, name="seeded-reflect")


@pytest.mark.parametrize("style", ["evidence_wide", "per_pattern"])
def test_a_round_that_repeats_an_earlier_question_asks_at_fresh_seeds(style):
    """Round 1 finds nothing usable and changes nothing, so round 2 diagnoses the same whole pool
    and would ask round 1's question again; asked at a fresh seed, it gets another answer (the
    per-pattern proposer's first answer, greedy in a new question, is sampled too)."""
    rl = _seed_sensitive_reflector()
    out = compile_toy(None, rl=rl, num_rounds=2, num_candidates=1, proposal_style=style)
    res = out.detailed_results
    first, second = res.rounds
    assert not any(c.decision for c in first.candidates)  # the uncited rule is not tested
    assert [c["example_id"] for c in first.diagnosis_cases] == [c["example_id"] for c in second.diagnosis_cases]
    assert second.adopted_candidate_id is not None and COUNT_RULE in out.generate.signature.instructions
    one_round = _seed_sensitive_reflector()
    compile_toy(None, rl=one_round, num_rounds=1, num_candidates=1, proposal_style=style)
    n1 = len(engine_of(one_round).calls)  # round 1's calls: each at the LM's own seed
    seeds = [c.seed for c in engine_of(rl).calls]
    assert n1 >= 2 and set(seeds[:n1]) == {None} and seeds[n1:] and None not in seeds[n1:]


def test_at_temperature_zero_a_repeated_question_is_not_asked_again():
    rl = _seed_sensitive_reflector()
    out = compile_toy(None, rl=rl, num_rounds=2, num_candidates=1, reflection_temperature=0.0)
    _, second = out.detailed_results.rounds
    assert len(engine_of(rl).calls) == 5  # round 1's only: gradient, edits, the per-pattern fallback's three
    assert any("asking again would repeat" in n for n in second.notes)
    assert COUNT_RULE not in out.generate.signature.instructions
