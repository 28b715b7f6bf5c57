"""Issue 13, items 3 and 4: fail fast like dspy.Evaluate (max_errors, the first traceback logged, an abort
when the first rollouts all fail for one reason), and DSPy's conventions: num_threads and max_errors from
dspy.settings, total_metric_calls equal to what the metric saw, GEPA's result fields, JSON, summary(), and
MIPROv2's constructor and compile arguments. Real SQLite, scripted LMs."""

from __future__ import annotations

import json
import logging
import re
import threading

import dspy
import pytest
from dropin_world import RULE, Raises, examples, reflection_lm, task_lm

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.metrics.sql import sql_execution_metric
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.optimizer.result import HeroResult, json_default
from dspy_hero.optimizer.rollout import RolloutAbort
from dropin_world import answer

PROGRAM = "question, db_schema -> sql"


def compile_(data, metric=None, student=None, lm=None, **kw):
    kw.setdefault("num_rounds", 2)
    kw.setdefault("max_metric_calls", 200)
    with dspy.context(lm=lm or task_lm()):
        out = HeroOptimizer(metric, reflection_lm=reflection_lm(), display_progress=False, **kw).compile(
            student or dspy.Predict(PROGRAM), data)
    return out, out.detailed_results


class Counting:
    """A metric wrapper that counts every call it sees."""

    def __init__(self, metric):
        self.metric, self.calls, self.lock = metric, 0, threading.Lock()
        self.prediction_field = getattr(metric, "prediction_field", None)

    def __call__(self, gold, pred, trace=None):
        with self.lock:
            self.calls += 1
        return self.metric(gold, pred, trace)


# ---- item 3: fail fast -------------------------------------------------------------------------------

def test_a_program_that_raises_on_every_call_stops_after_the_first_rollouts(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    metric = Counting(sql_execution_metric())
    with pytest.raises(RolloutAbort, match=r"first 1\d rollouts( to finish)? all failed for the same reason: RuntimeError"):
        compile_(examples(tmp_path), metric=metric, student=Raises())
    assert metric.calls <= 2  # the pre-flight only: failed rollouts never reach the metric
    first = [r.getMessage() for r in caplog.records if "first failing rollout" in r.getMessage()]
    assert len(first) == 1 and "Traceback" in first[0] and "bug in forward" in first[0]


def test_a_metric_that_raises_on_every_real_prediction_stops_the_run(tmp_path):
    base = sql_execution_metric()

    def metric(gold, pred, trace=None):
        if pred.sql:  # the pre-flight's empty prediction passes; every real one raises
            raise KeyError("the metric reads a field the examples lack")
        return base(gold, pred)

    counted = Counting(metric)
    with pytest.raises(RolloutAbort, match=r"same reason: metric raised KeyError"):
        compile_(examples(tmp_path), metric=counted)
    assert counted.calls <= 1 + 10 + dspy.settings.num_threads  # pre-flight, the streak, rollouts in flight


def test_an_all_broken_gold_stops_the_run(tmp_path):
    data = examples(tmp_path, gold_sql=lambda kind, age: "SELECT nope FROM missing_table")
    with pytest.raises(RolloutAbort, match=r"same reason: gold query failed: the reference query fails with"):
        compile_(data)


def test_max_errors_counts_exceptions_but_not_format_failures(tmp_path):
    def flaky(raises: bool):
        """Fails on every question about age 30 (a fifth of the examples, whatever the thread order):
        raises, or answers with no fields at all (an AdapterParseError, also on DSPy's JSON retry)."""

        def script(req):
            if "older than 30" in req.inputs.get("question", ""):
                if raises:
                    raise TimeoutError("request timed out")
                return "no fields at all"
            return {"sql": answer(req.inputs["question"], req.instructions)}

        return scripted_lm(script, name="flaky")

    with pytest.raises(RolloutAbort, match=r"more than max_errors=5"):
        compile_(examples(tmp_path), lm=flaky(True), max_errors=5)
    _, res = compile_(examples(tmp_path), lm=flaky(True), max_errors=1000)  # tolerated when allowed
    assert any("Error" in k for k in res.rollout_errors)
    _, res = compile_(examples(tmp_path), lm=flaky(False), max_errors=2)  # parse failures are evidence
    assert res.rollout_errors.get("AdapterParseError", 0) > 2


def test_the_streak_is_judged_in_start_order_not_in_the_order_threads_finish():
    """Parse failures return at once, the answers being executed later: on a loaded machine the first
    three rollouts to *finish* were all failures although a fifth of the examples fail, and the run
    was stopped. The first three *started* decide, whichever order they finish in."""
    from dspy_hero.optimizer.rollout import FailFast, RolloutResult

    def done(ex: str, error: str | None = None) -> RolloutResult:
        return RolloutResult(ex, 0.0 if error else 1.0, "", error=error)

    parse = "AdapterParseError: no fields"
    watch = FailFast(max_errors=2)
    first = watch.start(6)
    for pos in (3, 4, 5):  # the failures finish first
        watch.observe(done(f"t{pos}", parse), 3, 100, first + pos)
    for pos in (0, 1, 2):
        watch.observe(done(f"t{pos}"), 6, 100, first + pos)
    watch = FailFast(max_errors=2)
    watch.start(2)
    watch.observe(done("t1", parse), 1, 100, 1)
    watch.observe(done("t0", parse), 2, 100, 0)
    later = watch.start(4)  # a later batch goes on numbering
    with pytest.raises(RolloutAbort, match=r"first 3 rollouts all failed for the same reason: AdapterParseError"):
        watch.observe(done("t9", parse), 3, 100, later)


def test_max_errors_and_num_threads_default_to_dspy_settings(tmp_path):
    with dspy.context(num_threads=4, max_errors=7):
        _, res = compile_(examples(tmp_path), num_rounds=1, max_metric_calls=60)
    assert res.settings["num_threads"] == 4 and res.settings["max_errors"] == 7
    with dspy.context(num_threads=4):
        _, res = compile_(examples(tmp_path), num_rounds=1, max_metric_calls=60, num_threads=2, max_errors=3)
    assert res.settings["num_threads"] == 2 and res.settings["max_errors"] == 3


# ---- item 4: conventions -----------------------------------------------------------------------------

def test_total_metric_calls_is_what_the_metric_saw(tmp_path):
    metric = Counting(sql_execution_metric())
    _, res = compile_(examples(tmp_path), metric=metric)
    assert res.preflight_metric_calls >= 1
    assert metric.calls == res.total_metric_calls <= res.budget


def test_detailed_results_has_gepa_fields_and_is_json(tmp_path):
    log_dir = tmp_path / "log"
    out, res = compile_(examples(tmp_path), log_dir=str(log_dir), max_metric_calls=300)
    assert res.final_entry_id != "seed"
    assert res.candidates[0] == res.seed_instructions and res.best_candidate == res.final_instructions
    assert res.candidates[res.best_idx] == res.final_instructions
    assert len(res.candidates) == len(res.archive) == len(res.val_aggregate_scores) == len(res.val_subscores)
    assert res.parents == [[None]] + [[i] for i in range(len(res.candidates) - 1)]
    assert res.discovery_eval_counts == sorted(res.discovery_eval_counts) and len(res.discovery_eval_counts) == len(res.candidates)
    assert res.log_dir == str(log_dir) and res.seed == 0 and res.best_outputs_valset is None
    scored = [i for i, v in enumerate(res.val_subscores) if v]
    for i in scored:
        assert res.val_aggregate_scores[i] == pytest.approx(sum(res.val_subscores[i].values()) / len(res.val_subscores[i]))
    for ex_id, best in res.per_val_instance_best_candidates.items():
        top = max(v[ex_id] for v in res.val_subscores if ex_id in v)
        assert best and all(res.val_subscores[k][ex_id] == top for k in best)
    text = json.dumps(res.to_dict())
    assert json.loads(text)["best_candidate"] == res.final_instructions
    assert json.loads(json.dumps(res, default=json_default)) == json.loads(text)
    assert HeroResult.from_dict(json.loads(text)).to_dict() == json.loads(text)


def test_summary_shows_rounds_decisions_fix_breaks_and_tokens(tmp_path):
    _, res = compile_(examples(tmp_path), max_metric_calls=300)
    s = res.summary()
    tested = sum(c.decision is not None for r in res.rounds for c in r.candidates)
    assert f"{len(res.rounds)} rounds" in s and f"{tested} tested" in s and "1 adopted" in s
    assert f"adopted {res.adopted_fixes}/{res.adopted_breaks} in-sample" in s
    assert f"task LM {res.task_lm.tokens} in {res.task_lm.calls} calls" in s and res.task_lm.tokens > 0
    assert f"reflection LM {res.reflection_lm.tokens} in {res.reflection_lm.calls} calls" in s


def test_miprov2_style_code_runs(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    tl, rl = task_lm(), reflection_lm()
    opt = HeroOptimizer(
        metric=sql_execution_metric(), prompt_model=rl, task_model=tl, teacher_settings={"lm": tl},
        max_bootstrapped_demos=4, max_labeled_demos=4, auto=None, max_metric_calls=300, num_threads=2, max_errors=10,
        seed=9, init_temperature=1.0, verbose=True, track_stats=True, metric_threshold=0.5, display_progress=False)
    assert len([r for r in caplog.records if "ignores dspy.MIPROv2 options" in r.getMessage()]) == 1
    # no dspy.configure / dspy.context: the task LM is task_model, the reflector prompt_model
    out = opt.compile(dspy.Predict(PROGRAM), trainset=examples(tmp_path), num_trials=2, max_bootstrapped_demos=2,
                      max_labeled_demos=2, minibatch_size=35, requires_permission_to_run=False, teacher=None)
    res = out.detailed_results
    warned = [r.getMessage() for r in caplog.records if "compile ignores dspy.MIPROv2" in r.getMessage()]
    assert len(warned) == 1 and "minibatch_size" in warned[0] and "requires_permission_to_run" in warned[0]
    assert res.settings["num_rounds"] == 2 and len(res.rounds) <= 2 and res.seed == 9
    assert engine_of(tl).call_count > 0 and engine_of(rl).call_count > 0
    assert RULE in out.signature.instructions
    assert any(re.match(r"HERO-O round 1 ", r.getMessage()) for r in caplog.records if r.levelno == logging.WARNING)
    with pytest.raises(TypeError, match="unexpected keyword"):
        opt.compile(dspy.Predict(PROGRAM), trainset=examples(tmp_path), not_an_argument=1)
    with pytest.raises(ValueError, match="prompt_model"):
        HeroOptimizer(reflection_lm=rl, prompt_model=tl)
