"""HeroOptimizer end to end on the scripted toy task: the loop's decisions are checked exactly."""

from __future__ import annotations

import logging
import re

import dspy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from optimizer_toy import (
    COUNT_RULE,
    LIMIT_RULE,
    NOOP_RULE,
    SUM_RULE,
    answer_for,
    feedback_metric,
    float_metric,
    make_examples,
    norm,
    program,
    reflection_lm,
    task_lm,
)

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.metrics.base import MetricError
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.result import CandidateStatus
from dspy_hero.tasks.programs import SEED_INSTRUCTIONS

SEED = SEED_INSTRUCTIONS["sql"]


def run(train, rules, metric=feedback_metric, tl=None, rl=None, valset=None, **kw):
    tl = tl or task_lm()
    rl = rl or reflection_lm(rules)
    kw.setdefault("max_metric_calls", 600)
    kw.setdefault("display_progress", False)
    kw.setdefault("max_proposal_calls", 1)  # one edits call per round: `rules[k]` is round k's proposal
    student = program()
    with dspy.context(lm=tl):
        out = HeroOptimizer(metric, reflection_lm=rl, **kw).compile(student, train, valset=valset)
    return out, out.detailed_results, tl, rl


def decisions(res):
    return {c.edit.split(": ", 1)[-1]: c for r in res.rounds for c in r.candidates}


def test_helpful_candidate_is_accepted_and_returned():
    out, res, tl, _ = run(make_examples(60), [[COUNT_RULE], [SUM_RULE]], num_rounds=2)
    instr = out.generate.signature.instructions
    assert instr.startswith(SEED) and COUNT_RULE in instr and SUM_RULE in instr
    d = decisions(res)[COUNT_RULE].decision
    assert d.accepted and d.fixes > 0 and d.breaks == 0
    assert res.rounds[0].adopted_candidate_id == "r1c1" and res.final_entry_id == "r2c1"
    assert res.adopted_fix_break_ratio is None and res.adopted_fixes > 0  # no breaks at all
    assert res.total_metric_calls <= 600 and engine_of(tl).call_count == res.total_metric_calls - res.preflight_metric_calls
    assert res.task_lm.calls == res.total_metric_calls - res.preflight_metric_calls and res.reflection_lm.calls == 4
    assert res.tokens_per_optimization_call and res.final_prompt_tokens > 0


def test_candidate_that_fixes_some_and_breaks_more_is_rejected():
    train = make_examples(80, kinds=("count", "plain", "plain", "sum"))
    out, res, _, _ = run(train, [[LIMIT_RULE]], num_rounds=1)
    d = decisions(res)[LIMIT_RULE].decision
    assert not d.accepted and d.breaks > d.fixes
    # it does fix the counting questions (and breaks every listing one)
    assert answer_for("How many rows are in table tbl0?", LIMIT_RULE) == "SELECT COUNT(*) FROM tbl0"
    assert out.generate.signature.instructions == SEED
    assert res.overall_breaks == d.breaks and res.adopted_breaks == 0


def test_candidate_below_the_margin_is_rejected():
    train = make_examples(80, kinds=("count", "plain", "plain", "plain"))
    _, res, _, _ = run(train, [[COUNT_RULE]], num_rounds=1, acceptance_margin=0.5)
    d = decisions(res)[COUNT_RULE].decision
    assert not d.accepted and d.breaks == 0 and 0 < d.estimate <= 0.5
    _, res, _, _ = run(train, [[COUNT_RULE]], num_rounds=1, acceptance_margin=0.0)
    assert decisions(res)[COUNT_RULE].decision.accepted


def test_the_sample_grows_only_while_the_decision_is_open():
    train = make_examples(120, kinds=("count", "plain"))
    mixed = "Use COUNT(*) for how-many questions and always add LIMIT 1 to every query."
    limit = "Always add LIMIT 1 to every query to keep results small."
    _, res, _, _ = run(train, [[COUNT_RULE, mixed, limit]], num_rounds=1, max_metric_calls=2000)
    good, unsure, bad = (decisions(res)[r].decision for r in (COUNT_RULE, mixed, limit))
    assert good.accepted and good.breaks == 0 and good.settled
    # about as many fixes as breaks: open after the first look, so it gets more pairs than the clear ones
    assert not unsure.accepted and len(unsure.stages) > 1 and unsure.n > max(good.n, bad.n)
    assert not bad.accepted and bad.fixes == 0 and bad.n <= 16
    assert res.rounds[0].adopted_candidate_id == decisions(res)[COUNT_RULE].candidate_id


def test_memorizing_candidate_of_a_diagnosis_case_is_blocked_exactly():
    seen = {}

    def reflect(req):
        if "evidence" in req.inputs:
            # the first failing counting case: its gold is SELECT COUNT(*) FROM <its table>
            m = re.search(r"### Case (F\d+) [^\n]*\nInputs:\n  question: How many rows are in table (\w+)", req.inputs["evidence"])
            seen["case"], seen["table"] = m.group(1), m.group(2)
            return {"preserve": "- (P1)", "revise": f"- counting is wrong ({seen['case']})"}
        table, case = seen["table"], seen["case"]
        return {"edits": f"ADD: When asked about {table}, answer SELECT COUNT(*) FROM {table} ({case})\n"
                         f"ADD: {COUNT_RULE} ({case})"}

    _, res, _, _ = run(make_examples(30), None, rl=scripted_lm(reflect), num_rounds=1)
    c1, c2 = res.rounds[0].candidates
    assert c1.status == "blocked" and not c1.guard_allowed and "label 'gold_sql'" in c1.guard_reason
    assert c2.guard_allowed and c2.status == "adopted"


def test_two_argument_float_metric_works():
    out, res, _, _ = run(make_examples(60), [[COUNT_RULE]], metric=float_metric, num_rounds=1)
    assert COUNT_RULE in out.generate.signature.instructions


def test_garbage_reflection_never_adopts_and_returns_seed_with_warning(caplog):
    rl = reflection_lm(None, garbage="lorem ipsum dolor sit amet }{ ### ]]")
    with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer"):
        out, res, _, _ = run(make_examples(40), None, rl=rl, num_rounds=3)
    assert out.generate.signature.instructions == SEED
    assert all(r.adopted_candidate_id is None for r in res.rounds)
    assert all(c.status is CandidateStatus.DROPPED and c.reason for r in res.rounds for c in r.candidates)
    assert any("adopted no candidate" in w for w in res.warnings)
    assert "adopted no candidate" in caplog.text


def test_reflection_lm_that_raises_is_recorded_and_seed_returned():
    def boom(req):
        raise ConnectionRefusedError("connection refused")

    out, res, _, _ = run(make_examples(40), None, rl=scripted_lm(boom), num_rounds=2)
    assert out.generate.signature.instructions == SEED
    assert all("connection refused" in (r.reflection_error or "") for r in res.rounds)


def test_failing_task_lm_counts_rollouts_as_failures_and_continues():
    def fail(req):
        n = int(re.search(r"tbl(\d+)", req.inputs["question"]).group(1))
        if n % 5 == 0:
            raise TimeoutError("request timed out")
        if n % 5 == 1:
            return "I think the answer is probably a query"  # no output fields: adapter parse error
        if n % 5 == 2:
            return ""  # empty output
        return None

    tl = task_lm(fail)
    budget = 400  # 60% of rollouts fail: the test needs more pairs to see the rule's fixes
    # max_errors raised: 20% of rollouts time out, which aborts a run at dspy.Evaluate's default of 10
    out, res, tl, _ = run(make_examples(120), [[COUNT_RULE]], tl=tl, num_rounds=2, max_metric_calls=budget, max_errors=1000)
    assert res.total_metric_calls <= budget
    errs = res.rollout_errors
    assert errs and sum(errs.values()) > 0 and any("Error" in k for k in errs)
    errors = [c["error"] for r in res.rounds for c in r.diagnosis_cases if c["error"]]
    assert any("timed out" in e for e in errors) and any("AdapterParseError" in e for e in errors)
    assert COUNT_RULE in out.generate.signature.instructions  # the run still learned from the rest


def test_bad_input_fails_before_any_budget_is_spent():
    tl, rl = task_lm(), reflection_lm([[COUNT_RULE]])
    opt = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=50, display_progress=False)
    with dspy.context(lm=tl):
        with pytest.raises(ValueError, match="trainset is empty"):
            opt.compile(program(), [])
        missing = make_examples(10)
        missing[4] = dspy.Example(question="How many rows are in table tbl4?").with_inputs("question")
        with pytest.raises(ValueError, match="example t4"):
            opt.compile(program(), missing)
        with pytest.raises(ValueError, match="input fields"):
            opt.compile(program(), [dspy.Example(question="q", gold_sql="x")] * 3)

        def raising(gold, pred):
            raise RuntimeError("metric bug")

        with pytest.raises(ValueError, match="metric bug"):
            HeroOptimizer(raising, reflection_lm=rl, max_metric_calls=50).compile(program(), make_examples(10))
        with pytest.raises(MetricError, match=r"\[0, 1\]"):
            HeroOptimizer(lambda g, p: 100.0, reflection_lm=rl, max_metric_calls=50).compile(program(), make_examples(10))
        with pytest.raises(ValueError, match="at most one"):
            HeroOptimizer(feedback_metric, auto="light", max_metric_calls=5)
    assert engine_of(tl).call_count == 0 and engine_of(rl).call_count == 0
    with pytest.raises(ValueError, match="no task LM"), dspy.context(lm=None):
        opt.compile(program(), make_examples(10))


def test_metric_scoring_out_of_range_mid_run_is_a_clear_error():
    def metric(gold, pred):
        return 5.0 if "COUNT" in getattr(pred, "sql", "") else 0.0

    with pytest.raises(MetricError, match="score 5.0"):
        run(make_examples(30), [[COUNT_RULE]], metric=metric, num_rounds=1)


def test_student_is_not_mutated_and_result_saves(tmp_path):
    student = program()
    before = student.generate.signature.instructions
    tl, rl = task_lm(), reflection_lm([[COUNT_RULE]])
    with dspy.context(lm=tl):
        out = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=300, num_rounds=1,
                            display_progress=False).compile(student, make_examples(40))
    assert student.generate.signature.instructions == before and out is not student
    assert not hasattr(student, "detailed_results")
    path = tmp_path / "prog.json"
    out.save(str(path))
    fresh = program()
    fresh.load(str(path))
    assert fresh.generate.signature.instructions == out.generate.signature.instructions != before
    out.detailed_results.save_json(tmp_path / "r.json")
    from dspy_hero.optimizer.result import HeroResult

    back = HeroResult.load_json(tmp_path / "r.json")
    assert back.to_dict() == out.detailed_results.to_dict()


def test_default_compile_infers_budget_and_is_deterministic_across_threads():
    train = make_examples(45)
    a = run(train, [[COUNT_RULE, NOOP_RULE], [SUM_RULE]], max_metric_calls=None, num_rounds=2, num_threads=1)[1]
    b = run(train, [[COUNT_RULE, NOOP_RULE], [SUM_RULE]], max_metric_calls=None, num_rounds=2, num_threads=4)[1]
    from dspy_hero.optimizer.budget import gepa_auto_budget

    assert a.budget == gepa_auto_budget("light", 1, 45, None)
    da, db = a.to_dict(), b.to_dict()
    assert da.pop("settings")["num_threads"] == 1 and db.pop("settings")["num_threads"] == 4
    assert da == db


def test_grouped_pools_in_a_run_and_valset_as_selection():
    train = make_examples(60, groups=6)
    val = make_examples(12, start=100, groups=3)
    _, res, _, _ = run(train, [[COUNT_RULE]], valset=val, group_key="db_id", num_rounds=1)
    p = res.pools
    assert p["selection"] == [f"v{i}" for i in range(12)] and p["selection_is_valset"]
    by_id = {f"t{i}": ex.db_id for i, ex in enumerate(train)}
    assert not {by_id[i] for i in p["diagnosis"]} & {by_id[i] for i in p["update"]}


class TwoStep(dspy.Module):
    def __init__(self):
        super().__init__()
        self.plan = dspy.Predict(dspy.Signature("question -> plan", "Describe the query plan."))
        self.write = dspy.Predict(dspy.Signature("question, plan -> sql", "Write one SQLite query."))

    def forward(self, question):
        plan = self.plan(question=question).plan
        return self.write(question=question, plan=plan)


def test_multi_predictor_round_robin_uses_per_predictor_traces():
    def script(req):
        if "plan" in req.output_fields:
            return {"plan": "count rows" if "count" in req.instructions.lower() else "select rows"}
        q = req.inputs["question"]
        if q.startswith("How many") and req.inputs.get("plan") == "count rows":
            return {"sql": answer_for(q, "count")}
        return {"sql": answer_for(q, "")}

    seen_evidence = []

    def reflect(req):
        if "evidence" in req.inputs:
            seen_evidence.append(req.inputs["evidence"])
            return {"preserve": "- (P1)", "revise": "- counting (F1)"}
        return {"edits": f"ADD: {COUNT_RULE} (F1)"}

    tl, rl = scripted_lm(script), scripted_lm(reflect)
    with dspy.context(lm=tl):
        out = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=800, num_rounds=2,
                            display_progress=False).compile(TwoStep(), make_examples(60))
    res = out.detailed_results
    assert [r.predictor for r in res.rounds] == ["plan", "write"]
    assert COUNT_RULE in out.plan.signature.instructions  # the plan step was the one that needed it
    write_evidence = [e for e in seen_evidence if "Inputs to this step" in e]
    assert write_evidence and all("plan:" in e for e in write_evidence)  # round 2 shows the write step's inputs


def test_per_predictor_feedback_failure_keeps_the_rollout_score():
    """A 5-argument metric that only fails when asked for one predictor's feedback: the rollout keeps
    its real score and the other predictor's feedback (only that feedback is lost)."""
    from dspy_hero.optimizer.budget import Budget
    from dspy_hero.metrics.base import MetricAdapter
    from dspy_hero.optimizer.rollout import Rollouts

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        if pred_name == "plan":
            raise KeyError("no feedback for the plan step")
        fb = f"feedback for {pred_name or 'the program'}"
        return dspy.Prediction(score=float(norm(pred.sql) == norm(gold.gold_sql)), feedback=fb)

    def script(req):
        if "plan" in req.output_fields:
            return {"plan": "select rows"}
        return {"sql": answer_for(req.inputs["question"], "")}

    examples = make_examples(3, kinds=("plain",))
    budget = Budget(9)  # 3 rollouts + 2 per-predictor feedback executions each: every one is charged
    rollouts = Rollouts(TwoStep(), MetricAdapter(metric), budget, display_progress=False)
    with dspy.context(lm=scripted_lm(script)):
        got = rollouts.run("k", {}, [(f"t{i}", ex) for i, ex in enumerate(examples)])
    assert budget.spent == 9 and len(got) == 3 and rollouts.feedback_calls == 6
    for r in got.values():
        assert r.score == 1.0 and r.error is None, r
        assert r.predictor_feedback == {"write": "feedback for write"} and r.feedback_calls == 2
    # With no budget left for them, the extra executions are not made (the overall feedback stands in).
    budget = Budget(3)
    rollouts = Rollouts(TwoStep(), MetricAdapter(metric), budget, display_progress=False)
    with dspy.context(lm=scripted_lm(script)):
        got = rollouts.run("k", {}, [(f"t{i}", ex) for i, ex in enumerate(examples)])
    assert budget.spent == 3 and rollouts.feedback_calls == 0 and all(not r.predictor_feedback for r in got.values())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=st.one_of(st.integers(0, 12), st.integers(13, 250)), threads=st.sampled_from([1, 3]))
def test_budget_is_never_exceeded(budget, threads):
    tl = task_lm()
    metric_calls = []

    def counted(gold, pred, trace=None, pred_name=None, pred_trace=None):
        metric_calls.append(1)
        return feedback_metric(gold, pred, trace, pred_name, pred_trace)

    _, res, tl, _ = run(make_examples(36), [[COUNT_RULE, NOOP_RULE, LIMIT_RULE], [SUM_RULE], [NOOP_RULE]],
                        metric=counted, tl=tl, max_metric_calls=budget, num_rounds=3, num_threads=threads)
    assert res.total_metric_calls <= budget
    assert engine_of(tl).call_count <= budget  # one task-LM call per rollout: the ground truth
    assert engine_of(tl).call_count == res.total_metric_calls - res.preflight_metric_calls
    # Every metric call, the pre-flight check included, is paid from the same budget.
    assert len(metric_calls) == res.total_metric_calls <= budget


def test_gepa_only_arguments_are_accepted_and_warned_once(caplog):
    with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer"):
        opt = HeroOptimizer(feedback_metric, auto="light", reflection_lm=reflection_lm([]), use_merge=True,
                            reflection_minibatch_size=3, candidate_selection_strategy="pareto", track_stats=True,
                            skip_perfect_score=True, gepa_kwargs={"x": 1}, num_threads=2, seed=1, log_dir=None)
    warned = [r for r in caplog.records if "no HERO-O meaning" in r.getMessage()]
    assert len(warned) == 1 and "use_merge" in warned[0].getMessage() and "gepa_kwargs" in warned[0].getMessage()
    assert opt.get_params()["auto"] == "light" and opt.ignored_gepa_args[0] == "candidate_selection_strategy"
    import dspy_hero

    assert dspy_hero.HeroOptimizer is HeroOptimizer


def test_gepa_style_instruction_proposer_gives_guarded_full_text_candidates():
    calls = []

    def proposal_fn(candidate, reflective_dataset, components_to_update):
        calls.append((dict(candidate), components_to_update, len(reflective_dataset["generate"])))
        return {"generate": SEED + " Use COUNT(*) whenever the question asks how many rows there are."}

    out, res, _, rl = run(make_examples(60), None, instruction_proposer=proposal_fn, num_rounds=1)
    assert calls and calls[0][1] == ["generate"] and calls[0][2] > 0
    cand = res.rounds[0].candidates[0]
    assert cand.kind == "text" and cand.guard_allowed and cand.status == "adopted"
    assert out.generate.signature.instructions.endswith("how many rows there are.")
    assert engine_of(rl).call_count == 0  # the proposer did not use the reflection LM


def test_use_mlflow_without_mlflow_installed_still_runs(caplog):
    try:
        import mlflow  # noqa: F401
        pytest.skip("mlflow is installed; this checks the fallback")
    except ImportError:
        pass
    with caplog.at_level(logging.WARNING, logger="dspy_hero.optimizer"):
        out, res, _, _ = run(make_examples(30), [[COUNT_RULE]], num_rounds=1, use_mlflow=True)
    assert "mlflow is not installed" in caplog.text and res.rounds


def test_lm_set_on_the_predictor_is_used_and_shared_not_copied(caplog):
    tl, rl = task_lm(), reflection_lm([[COUNT_RULE]])
    student = program()
    student.generate.lm = tl
    with caplog.at_level(logging.WARNING):
        out = HeroOptimizer(feedback_metric, reflection_lm=rl, max_metric_calls=200, num_rounds=1,
                            display_progress=False).compile(student, make_examples(40))
    assert out.generate.lm is tl and student.generate.lm is tl
    assert engine_of(tl).call_count == out.detailed_results.total_metric_calls - out.detailed_results.preflight_metric_calls > 0
    assert "Failed to deep copy" not in caplog.text


def test_small_budget_runs_fewer_better_funded_rounds_and_says_so():
    # 80 calls: two planned rounds of >= 24 calls, so round 1's test gets more pairs than under T=5.
    _, res, _, _ = run(make_examples(60), [[COUNT_RULE]] * 5, max_metric_calls=80, num_rounds=5)
    assert any("funds 2 of num_rounds=5" in w for w in res.warnings)
    funded = res.rounds[0].candidates[0].decision
    assert res.rounds[0].metric_calls >= 24 and res.total_metric_calls <= 80 and res.rounds[-1].round <= 5
    # the paper's fixed T=5 at this budget: 12 calls a round, a smaller sample for the same rule
    _, res, _, _ = run(make_examples(60), [[COUNT_RULE]] * 5, max_metric_calls=80, num_rounds=5, min_calls_per_round=0)
    assert len(res.rounds) == 5 and not any("funds" in w for w in res.warnings)
    first = res.rounds[0]
    # a smaller sample for the same rule, or none at all: a round whose share cannot pay one first look
    # asks no reflection (and leaves its calls to later rounds)
    assert first.metric_calls < 24 and (first.candidates[0].decision.n < funded.n if first.candidates else
                                        any("cannot fund one candidate's first look" in n for n in first.notes))


def test_rounds_with_an_unchanged_prompt_show_new_cases_and_do_not_retest_rejected_rules():
    train = make_examples(80, kinds=("count", "plain", "plain", "sum"))
    # LIMIT_RULE breaks more than it fixes: rejected in round 1, re-proposed in round 2.
    _, res, _, rl = run(train, [[LIMIT_RULE], [LIMIT_RULE]], num_rounds=2, evidence_token_budget=120,
                        max_metric_calls=400)
    r1, r2 = res.rounds
    shown = [{c["example_id"] for c in r.diagnosis_cases if c["case_id"] in r.shown_case_ids} for r in (r1, r2)]
    assert shown[0] and shown[1] and not shown[0] & shown[1]  # the prompt did not change; the evidence did
    (c1,), c2 = r1.candidates, r2.candidates[0]  # round 2 also asks the per-case proposer (the repeat is unusable)
    assert c1.status == "rejected" and c2.edit == c1.edit
    assert c2.status is CandidateStatus.DUPLICATE and c2.reason.startswith("already rejected") and c2.decision is None
    edit_calls = [c for c in engine_of(rl).calls if "current_rules" in c.inputs and "evidence" not in c.inputs]
    assert "rejected" not in edit_calls[0].inputs["current_rules"]  # round 2 is told what round 1 rejected
    assert "Already tested and rejected" in edit_calls[1].inputs["current_rules"] and LIMIT_RULE in edit_calls[1].inputs["current_rules"]
