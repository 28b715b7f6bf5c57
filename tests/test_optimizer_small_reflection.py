"""The small-model reflection path: per-failing-case rules, and the fallback that uses it only when the
evidence-wide proposal gave nothing usable (what a 1.5B reflection model does: empty fields or SQL)."""

from __future__ import annotations

import re

import dspy
import pytest
from optimizer_toy import COUNT_RULE, LIMIT_RULE, SUM_RULE, feedback_metric, make_examples, program, task_lm

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.optimizer.evidence import Case
from dspy_hero.optimizer.guard import MemorizationGuard
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.reflection import Proposal, ProposedEdit, ReflectionContext
from dspy_hero.optimizer.reflection_cases import (
    CaseRuleProposer,
    FallbackProposer,
    clean_rule,
    evidence_gradient,
    failure_category,
)


def case(cid: str, passed: bool, feedback: str, question: str = "q") -> Case:
    return Case(cid, cid.lower(), passed, float(passed), {"question": question}, {"sql": "SELECT 1"}, feedback)


def ctx_for(cases: list[Case], k: int) -> ReflectionContext:
    return ReflectionContext("generate", "Write one SQLite query.", (), "Write one SQLite query.", "(evidence)",
                             [c.case_id for c in cases], k, cases)


def test_failure_categories_and_code_built_gradient():
    assert failure_category("The query failed with SyntaxError: near 'SELEC'") == "SyntaxError"
    assert failure_category("returned 3 rows; the expected result differs (row count)") == "wrong result (row count)"
    cases = [case("F1", False, "OperationalError: no such column"), case("F2", False, "row count differs"),
             case("F3", False, "OperationalError: no such table"), case("P1", True, "matches")]
    text = evidence_gradient(cases, {"F1", "F2", "F3", "P1"})
    assert "OperationalError: 2 case(s) (F1, F3)" in text and "(P1)" in text
    assert text.index("OperationalError") < text.index("wrong result")  # most frequent first


def test_cases_are_spread_over_failure_categories():
    cases = [case("F1", False, "SyntaxError a"), case("F2", False, "SyntaxError b"), case("F3", False, "SyntaxError c"),
             case("F4", False, "values differ"), case("P1", True, "ok")]
    chosen = CaseRuleProposer().choose_cases(ctx_for(cases, 3))
    assert [c.case_id for c in chosen] == ["F1", "F4", "F2"]


def test_clean_rule_keeps_sentences_and_refuses_code():
    assert clean_rule("Rule: Always qualify column names with their table alias. Also ...")[0] == (
        "Always qualify column names with their table alias.")
    assert clean_rule("SELECT name FROM singer WHERE age > 3")[1] == "looks like code, not an instruction"
    assert clean_rule("```sql\nSELECT 1\n```")[1] is not None
    assert clean_rule("Use it.")[1] == "too short to be a general instruction"
    assert clean_rule("")[1] == "empty answer"


def test_a_role_placeholder_in_a_backticked_condition_is_not_markup():
    """"always add the condition `<that column> IS NULL`" names the column by its role: the wording the
    1.5B task model followed most on the demo's questions (17 vs 9 fixes of 56, RESULTS.md session 9),
    and the reflector's first answer once the worked example used it. Angle brackets anywhere else
    (a tag, a bare placeholder outside backticks) are still refused as markup."""
    rule = ("When a table has a column that flags archived or deleted rows (such as archived_at or deleted_at), those "
            "rows do not count: always add the condition `<that column> IS NULL` to the WHERE clause.")
    assert clean_rule(rule) == (rule, None)
    for text in ("Always wrap the names in <b>bold</b> tags.",
                 "When a table has a deletion column, always add <that column> IS NULL to the WHERE clause.",
                 "When a table has a deletion column, always add <that column> IS NULL, as in `deleted_at IS NULL`.",
                 "Always add the condition `deleted_at <> <script>` to the WHERE clause."):
        assert clean_rule(text)[1] == "contains markup or code symbols", text


def test_fallback_runs_only_when_the_evidence_wide_proposal_is_unusable():
    """Like the 1.5B model: the diagnosis fields come back empty and the edits as SQL; the per-case
    prompt still yields a rule, which paired acceptance then adopts because it fixes counting."""

    def small_model(req):
        if "failing_case" in req.inputs:  # the narrow per-case question
            return {"rule": "When the question asks how many rows, use COUNT(*) in the query."}
        if "evidence" in req.inputs:
            return {"preserve": "", "revise": ""}
        return {"edits": "```sql\nSELECT COUNT(*) FROM t\n```"}

    rl = scripted_lm(small_model)
    with dspy.context(lm=task_lm()):
        out = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=300, num_rounds=1,
                            num_candidates=2, max_proposal_calls=1, display_progress=False).compile(program(), make_examples(48))
    res = out.detailed_results
    assert "COUNT(*)" in out.generate.signature.instructions
    rnd = res.rounds[0]
    assert "fallback CaseRuleProposer" in rnd.gradient and "Revise:" in rnd.gradient
    adopted = [c for c in rnd.candidates if c.status == "adopted"]
    assert len(adopted) == 1 and adopted[0].decision.fixes > 0 and adopted[0].decision.breaks == 0
    asked = [c for c in engine_of(rl).calls if "failing_case" in c.inputs]
    # short prompts; at most one re-ask per chosen case (here the second case's rule repeats the first)
    assert 1 <= len(asked) <= 2 * 2 and all(len(c.user) < 2000 for c in asked)


def test_no_fallback_calls_when_the_evidence_wide_proposal_works():
    state = {"failing": []}

    def strong_model(req):
        if "failing_case" in req.inputs:
            raise AssertionError("the per-case proposer must not run")
        if "evidence" in req.inputs:
            state["failing"] = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            return {"preserve": "- (P1)", "revise": f"- counting ({state['failing'][0]})"}
        return {"edits": f"ADD: {COUNT_RULE} ({state['failing'][0]})\nADD: {SUM_RULE} ({state['failing'][0]})"}

    rl = scripted_lm(strong_model)
    with dspy.context(lm=task_lm()):
        out = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=300, num_rounds=1,
                            max_proposal_calls=1, display_progress=False).compile(program(), make_examples(48))
    assert engine_of(rl).call_count == 2
    assert out.detailed_results.rounds[0].candidates


def test_harmful_per_case_rule_is_still_rejected_by_acceptance():
    def harmful(req):
        if "failing_case" in req.inputs:
            return {"rule": LIMIT_RULE}
        return "garbage"

    with dspy.context(lm=task_lm()):
        out = HeroOptimizer(feedback_metric, reflection_lm=scripted_lm(harmful), max_metric_calls=300,
                            num_rounds=1, display_progress=False).compile(program(), make_examples(48))
    rnd = out.detailed_results.rounds[0]
    tested = [c for c in rnd.candidates if c.decision is not None]
    assert tested and all(not c.decision.accepted for c in tested)
    assert "LIMIT" not in out.generate.signature.instructions


def test_fallback_proposer_keeps_primary_when_usable():
    cases = [case("F1", False, "SyntaxError"), case("P1", True, "ok")]

    class Usable:
        def propose(self, ctx):
            from dspy_hero.optimizer.reflection import Proposal, ProposedEdit

            return Proposal(gradient="g", edits=[ProposedEdit("add", "Always do the right thing here.", None, ["F1"], "l")])

    class MustNotRun:
        def propose(self, ctx):
            raise AssertionError("fallback ran")

    assert FallbackProposer(Usable(), MustNotRun()).propose(ctx_for(cases, 2)).gradient == "g"


class Fixed:
    def __init__(self, *edits):
        self.edits = edits

    def propose(self, ctx):
        return Proposal(gradient="primary", edits=list(self.edits))


class Fallback:
    def __init__(self):
        self.calls = 0

    def propose(self, ctx):
        self.calls += 1
        return Proposal(gradient="per-case", edits=[ProposedEdit("add", "Always count rows with COUNT(*).", None, ["F1"], "l")])


def test_fallback_runs_when_the_primary_only_repeats_or_misnumbers_existing_rules():
    """A small model re-proposes the rule adopted last round, or replaces a rule number that does not
    exist: the optimizer drops both (apply_edit), so the per-case proposer must get its turn."""
    cases = [case("F1", False, "SyntaxError"), case("P1", True, "ok")]
    ctx = ctx_for(cases, 2)
    ctx.rules = ("Always qualify column names with the table alias.",)
    repeat = ProposedEdit("add", "Always  qualify column names with the table ALIAS.", None, ["F1"], "l")
    misnumbered = ProposedEdit("replace", "Always use double quotes for identifiers.", 3, ["F1"], "l")
    fallback = Fallback()
    out = FallbackProposer(Fixed(repeat, misnumbered), fallback).propose(ctx)
    assert fallback.calls == 1 and "fallback Fallback: Fixed gave no usable edit" in out.gradient
    fresh = ProposedEdit("replace", "Always use double quotes for identifiers.", 1, ["F1"], "l")
    assert FallbackProposer(Fixed(fresh), fallback).propose(ctx).gradient == "primary" and fallback.calls == 1


def test_fallback_guard_sees_only_the_cases_the_reflector_was_shown():
    """The optimizer guards candidates against the shown cases; a literal from a case the reflector
    never saw cannot have been copied, so it must not make the primary's edit count as unusable."""
    hidden = Case("F9", "f9", False, 0.0, {"question": "q"}, {"sql": "SELECT 1"}, "differs",
                  labels={"gold_sql": "SELECT * FROM t WHERE year = 1999"})
    cases = [case("F1", False, "SyntaxError"), case("P1", True, "ok"), hidden]
    ctx = ctx_for(cases, 2)
    ctx.shown_case_ids = ["F1", "P1"]
    edit = ProposedEdit("add", "When a year such as 1999 is asked for, compare the year column.", None, ["F1"], "l")
    fallback = Fallback()
    out = FallbackProposer(Fixed(edit), fallback, guard=MemorizationGuard()).propose(ctx)
    assert fallback.calls == 0 and out.gradient == "primary"
    ctx.shown_case_ids = ["F1", "P1", "F9"]
    FallbackProposer(Fixed(edit), fallback, guard=MemorizationGuard()).propose(ctx)
    assert fallback.calls == 1


def test_fallback_also_runs_when_the_only_edit_is_blocked_by_the_guard():
    """The 1.5B model's evidence-wide answer on Spider was one instance-specific rule; the guard blocks
    it, and the per-case proposer must still get its turn in the same round."""
    seen = {}

    def small_model(req):
        if "failing_case" in req.inputs:
            return {"rule": "When the question asks how many rows, use COUNT(*) in the query."}
        if "evidence" in req.inputs:
            m = re.search(r"### Case (F\d+) [^\n]*\nInputs:\n  question: How many rows are in table (\w+)",
                          req.inputs["evidence"])
            seen["case"], seen["table"] = m.group(1), m.group(2)
            return {"preserve": "- (P1)", "revise": f"- counting ({seen['case']})"}
        return {"edits": f"ADD: When asked about {seen['table']}, answer SELECT COUNT(*) FROM {seen['table']} ({seen['case']})"}

    with dspy.context(lm=task_lm()):
        out = HeroOptimizer(feedback_metric, reflection_lm=scripted_lm(small_model), max_metric_calls=300,
                            num_rounds=1, num_candidates=2, display_progress=False).compile(program(), make_examples(48))
    rnd = out.detailed_results.rounds[0]
    statuses = {c.edit.split(": ", 1)[-1][:20]: c.status for c in rnd.candidates}
    assert any(s == "blocked" for s in statuses.values()), statuses
    assert "COUNT(*)" in out.generate.signature.instructions and "fallback CaseRuleProposer" in rnd.gradient


def test_per_case_reflection_is_told_which_rules_were_already_rejected():
    from dataclasses import replace

    rl = scripted_lm(lambda req: {"rule": "Always qualify column names with their table name."})
    ctx = replace(ctx_for([case("F1", False, "SyntaxError")], 1), rejected=("ADD: Always add LIMIT 1.",))
    with dspy.context(lm=rl):
        proposal = CaseRuleProposer().propose(ctx)
    (call,) = engine_of(rl).calls
    assert "Rules already tried and rejected" in call.inputs["task_instructions"]
    assert "ADD: Always add LIMIT 1." in call.inputs["task_instructions"]
    assert [e.rule for e in proposal.edits] == ["Always qualify column names with their table name."]


def test_fallback_runs_when_the_primary_repeats_an_already_rejected_edit():
    from dataclasses import replace

    cases = [case("F1", False, "SyntaxError"), case("P1", True, "ok")]
    repeated = ProposedEdit("add", "Always match column names to the schema.", None, ["F1"], "l")
    fallback = Fallback()
    ctx = replace(ctx_for(cases, 2), rejected=("ADD: Always match column names to the schema.",))
    out = FallbackProposer(Fixed(repeated), fallback).propose(ctx)
    assert fallback.calls == 1 and [e.rule for e in out.edits][-1] == "Always count rows with COUNT(*)."
    fresh = FallbackProposer(Fixed(repeated), fallback).propose(ctx_for(cases, 2))  # not rejected: no fallback
    assert fallback.calls == 1 and fresh.gradient == "primary"


def test_proposal_style_decides_which_prompt_runs_first():
    """AUTO asks the per-pattern prompt alone only for the embedded local model (a scripted LM is not
    one); the forced styles are honoured; an unknown style is refused when the settings are made."""
    from dspy_hero.optimizer.reflection import RuleProposer
    from dspy_hero.optimizer.run import default_proposer
    from dspy_hero.optimizer.settings import HeroSettings, ProposalStyle

    rl = scripted_lm(lambda req: {"rule": "x"})
    assert isinstance(default_proposer(None, ProposalStyle.AUTO, rl).primary, RuleProposer)
    assert isinstance(default_proposer(None, ProposalStyle.PER_PATTERN, rl).primary, CaseRuleProposer)
    assert isinstance(default_proposer(None, ProposalStyle.PER_PATTERN, rl).fallback, RuleProposer)
    assert isinstance(default_proposer(None, ProposalStyle.EVIDENCE_WIDE, rl).primary, RuleProposer)
    assert type(default_proposer(None, ProposalStyle.PER_PATTERN_ONLY, rl)) is CaseRuleProposer
    # AUTO for the embedded model: per-pattern with no fallback; every forced style stays as given
    assert ProposalStyle.AUTO.for_reflector(local=True) is ProposalStyle.PER_PATTERN_ONLY
    assert ProposalStyle.AUTO.for_reflector(local=False) is ProposalStyle.EVIDENCE_WIDE
    assert all(s.for_reflector(local=flag) is s for s in ProposalStyle if s is not ProposalStyle.AUTO
               for flag in (True, False))
    assert HeroSettings(proposal_style="per_pattern").proposal_style is ProposalStyle.PER_PATTERN
    with pytest.raises(ValueError, match="proposal_style must be one of"):
        HeroSettings(proposal_style="sometimes")


def test_per_pattern_style_reaches_the_run():
    """HeroOptimizer(proposal_style="per_pattern") asks the one-pattern question (RuleFromFailure)
    before any evidence-wide call."""
    examples = make_examples(40)
    seen: list[str] = []

    def reflect(req):
        seen.append("rule" if req.output_fields == ("rule",) else "evidence-wide")
        return {"rule": SUM_RULE} if req.output_fields == ("rule",) else {"edits": "", "revise": "", "preserve": ""}

    rl = scripted_lm(reflect)
    opt = HeroOptimizer(metric=feedback_metric, reflection_lm=rl, max_metric_calls=60, num_rounds=1, num_candidates=1,
                        proposal_style="per_pattern", display_progress=False)
    with dspy.context(lm=task_lm()):
        opt.compile(program(), trainset=examples)
    assert seen and seen[0] == "rule"


@pytest.mark.parametrize("style", ["per_pattern", "per_pattern_only"])
def test_per_pattern_only_never_falls_back_to_the_evidence_wide_prompt(style):
    """A reflector whose per-pattern answers are all unusable (SQL, not a rule): "per_pattern" then
    asks the evidence-wide prompt, "per_pattern_only" asks only the per-pattern question, and both
    adopt nothing."""
    examples = make_examples(40)
    seen: list[str] = []

    def reflect(req):
        seen.append("rule" if req.output_fields == ("rule",) else "evidence-wide")
        return {"rule": "SELECT SUM(x) FROM t"} if req.output_fields == ("rule",) else {"edits": "", "revise": "", "preserve": ""}

    opt = HeroOptimizer(metric=feedback_metric, reflection_lm=scripted_lm(reflect), max_metric_calls=60, num_rounds=1,
                        num_candidates=1, proposal_style=style, display_progress=False)
    with dspy.context(lm=task_lm()):
        out = opt.compile(program(), trainset=examples)
    assert "rule" in seen and out.detailed_results.adopted_fixes == 0
    assert ("evidence-wide" in seen) is (style == "per_pattern")
