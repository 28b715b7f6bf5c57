"""Issue 13, item 2: HERO-O, HERO-T and the metrics work with any DSPy program (Predict, ChainOfThought,
multi-predictor modules, a custom forward(question, db_schema)) without marking environment fields as
inputs and without a warning per rollout; metrics take prediction_field=; a pre-flight check refuses,
before any budget or LM call is spent, outputs without the metric's field, a program that rejects the
examples' inputs, and label fields marked as inputs. Real SQLite, scripted LMs."""

from __future__ import annotations

import logging

import dspy
import pytest
from dropin_world import RULE, NeedsHint, PlanThenWrite, RenamedQuery, examples, reflection_lm, task_lm

from dspy_hero.lm.scripted import engine_of
from dspy_hero.metrics.base import program_input_names, program_inputs
from dspy_hero.metrics.cypher import cypher_execution_metric
from dspy_hero.metrics.python import ds_outputs_metric, python_tests_metric
from dspy_hero.metrics.sql import sql_execution_metric
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.refine.module import HeroRefine
from dspy_hero.tasks.evaluate import evaluate_program

SIGNATURE_WARNING = "not in signature"
FORWARD_WARNING = "Calling module.forward(...)"  # DSPy warns on each instance access to .forward


def compile_(student, data, metric=None, seen=None, **kw):
    tl = task_lm(seen)
    kw.setdefault("num_rounds", 2)
    kw.setdefault("max_metric_calls", 200)
    with dspy.context(lm=tl):
        out = HeroOptimizer(metric, reflection_lm=reflection_lm(), display_progress=False,
                            **kw).compile(student, data)
    return out, out.detailed_results, tl


class _Messages(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture
def dspy_log():
    """DSPy's own logger does not propagate to the root (pytest's caplog never sees its warnings):
    listen on it directly."""
    handler = _Messages()
    logger = logging.getLogger("dspy")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


def no_signature_warnings(handler) -> bool:
    return not any(SIGNATURE_WARNING in m or FORWARD_WARNING in m for m in handler.messages)


def test_the_warning_listener_hears_dspy(dspy_log):
    with dspy.context(lm=task_lm()):
        dspy.Predict("question, db_schema -> sql")(question="How many singers are older than 3?", db_schema="s",
                                                   db_path="/x")
    assert not no_signature_warnings(dspy_log)  # the check below can fail


def marked(data):
    """The README's old advice: environment references marked as inputs too (still allowed)."""
    return [ex.with_inputs("question", "db_schema", "db_path", "db_id") for ex in data]


@pytest.mark.parametrize("mark", [False, True], ids=["env-unmarked", "env-marked"])
@pytest.mark.parametrize("make", [
    lambda: dspy.Predict("question, db_schema -> sql"),
    lambda: dspy.ChainOfThought("question, db_schema -> sql"),
], ids=["Predict", "ChainOfThought"])
def test_plain_dspy_programs_learn_without_environment_inputs_or_warnings(tmp_path, dspy_log, make, mark):
    seen: list = []
    data = marked(examples(tmp_path)) if mark else examples(tmp_path)
    out, res, _ = compile_(make(), data, seen=seen)
    assert res.rollout_errors == {}
    assert no_signature_warnings(dspy_log)
    # the LM saw only the signature's inputs, never db_path / db_id / gold_sql
    assert seen and all(set(s) <= {"question", "db_schema"} for s in seen)
    instr = [p.signature.instructions for _, p in out.named_predictors()][-1]
    assert RULE in instr and res.final_entry_id != "seed"


def test_multi_predictor_module_with_custom_forward(tmp_path, dspy_log):
    out, res, _ = compile_(PlanThenWrite(), marked(examples(tmp_path)), max_metric_calls=300)
    assert res.rollout_errors == {} and no_signature_warnings(dspy_log)
    assert {r.predictor for r in res.rounds} == {"plan", "write"}
    assert RULE in out.write.signature.instructions


def test_custom_forward_with_another_output_field_and_prediction_field(tmp_path, dspy_log):
    out, res, _ = compile_(RenamedQuery(), examples(tmp_path), metric=sql_execution_metric(prediction_field="query"))
    assert res.rollout_errors == {} and no_signature_warnings(dspy_log)
    assert RULE in out.gen.signature.instructions
    # the inferred metric reads the program's single output field too
    out2, res2, _ = compile_(RenamedQuery(), examples(tmp_path))
    assert res2.rollout_errors == {} and RULE in out2.gen.signature.instructions


def test_preflight_refuses_outputs_without_the_metric_field_before_any_lm_call(tmp_path):
    tl = task_lm()
    with dspy.context(lm=tl), pytest.raises(ValueError, match=r"prediction field 'sql'.*\['query'\].*prediction_field='query'"):
        HeroOptimizer(sql_execution_metric(), reflection_lm=reflection_lm(), display_progress=False,
                      max_metric_calls=100).compile(dspy.Predict("question, db_schema -> query"), examples(tmp_path))
    assert engine_of(tl).call_count == 0
    # a custom forward is called once (no metric call) to read its outputs
    with dspy.context(lm=tl), pytest.raises(ValueError, match=r"prediction field 'sql'.*\['query'\]"):
        HeroOptimizer(sql_execution_metric(), reflection_lm=reflection_lm(), display_progress=False,
                      max_metric_calls=100).compile(RenamedQuery(), examples(tmp_path))
    assert engine_of(tl).call_count == 1


def test_preflight_refuses_a_program_that_rejects_the_inputs(tmp_path):
    tl = task_lm()
    with dspy.context(lm=tl), pytest.raises(ValueError, match=r"forward requires \['hint'\]"):
        HeroOptimizer(reflection_lm=reflection_lm(), display_progress=False, max_metric_calls=100).compile(
            NeedsHint(), examples(tmp_path))
    data = [ex.with_inputs("question") for ex in examples(tmp_path)]  # db_schema a field, not an input
    with dspy.context(lm=tl), pytest.raises(ValueError, match=r"\['db_schema'\] are fields of the example not marked"):
        HeroOptimizer(reflection_lm=reflection_lm(), display_progress=False, max_metric_calls=100).compile(
            PlanThenWrite(), data)
    assert engine_of(tl).call_count == 0


def test_preflight_refuses_label_fields_marked_as_inputs(tmp_path):
    tl = task_lm()
    data = [ex.with_inputs("question", "db_schema", "gold_sql") for ex in examples(tmp_path)]
    with dspy.context(lm=tl), pytest.raises(ValueError, match=r"label field\(s\) \['gold_sql'\] as inputs"):
        HeroOptimizer(reflection_lm=reflection_lm(), display_progress=False, max_metric_calls=100).compile(
            dspy.Predict("question, db_schema -> sql"), data)
    assert engine_of(tl).call_count == 0


def test_program_inputs_pass_only_what_a_program_accepts(tmp_path):
    ex = examples(tmp_path)[0].with_inputs("question", "db_schema", "db_path", "gold_sql")
    assert set(program_inputs(dspy.Predict("question, db_schema -> sql"), ex)) == {"question", "db_schema"}
    assert set(program_inputs(dspy.ChainOfThought("question -> sql"), ex)) == {"question"}
    assert set(program_inputs(PlanThenWrite(), ex)) == {"question", "db_schema"}

    class WantsPath(dspy.Module):
        def forward(self, question, db_path):
            return dspy.Prediction(sql="")

    # an environment reference the program names reaches it even when it is not an input; labels never
    assert program_inputs(WantsPath(), examples(tmp_path)[0]) == {"question": ex.question, "db_path": ex.db_path}
    assert "gold_sql" not in program_inputs(lambda **kw: None, ex)
    assert program_input_names(dspy.Predict("question, db_schema -> sql")) == ("question", "db_schema")


def test_hero_t_and_evaluate_with_a_custom_generator_and_unmarked_environment(tmp_path, dspy_log):
    data = examples(tmp_path, n_dbs=1)[:4]
    refine = HeroRefine(RenamedQuery(), budget=0, judge=False)
    assert "db_path" in refine.accepted_inputs()
    with dspy.context(lm=task_lm()):
        pred = refine(**data[0])  # the whole example: labels dropped, the generator gets its two inputs
        report = evaluate_program(refine, data, sql_execution_metric(prediction_field="query"))
    assert pred.query.startswith("SELECT") and "rows" in pred.refinement.steps[0].evidence  # it ran on SQLite
    assert [o.error for o in report.outcomes] == [None] * 4
    assert [o.score for o in report.outcomes] == [0.0, 1.0, 0.0, 1.0]  # counting fails without the rule
    assert no_signature_warnings(dspy_log)


def test_every_metric_factory_takes_prediction_field(tmp_path):
    ex = examples(tmp_path, n_dbs=1)[1]  # a listing question
    m = sql_execution_metric(prediction_field="query")
    assert m.prediction_field == "query"
    assert m(ex, dspy.Prediction(query=ex.gold_sql)).score == 1.0
    assert m(ex, dspy.Prediction(query="SELECT 1")).score == 0.0
    missing = m(ex, dspy.Prediction(sql=ex.gold_sql))
    assert missing.score == 0.0 and "no field 'query'" in missing.feedback and "no SQL query" not in missing.feedback
    default = sql_execution_metric()(ex, dspy.Prediction(query=ex.gold_sql))
    assert "prediction_field='query'" in default.feedback
    assert sql_execution_metric()(ex, dspy.Prediction(sql=ex.gold_sql)).score == 1.0
    for factory, default_field in ((cypher_execution_metric, "cypher"), (python_tests_metric, "code"),
                                   (ds_outputs_metric, "code")):
        assert factory().prediction_field == default_field
        assert factory(prediction_field="answer").prediction_field == "answer"
    with pytest.raises(ValueError):
        sql_execution_metric(prediction_field="not a name")


def test_python_metric_reads_the_named_field():
    ex = dspy.Example(prompt="add", test_code=(
        "import unittest\nclass TestCases(unittest.TestCase):\n    def test(self):\n        self.assertEqual(add(1, 2), 3)\n"
    )).with_inputs("prompt")
    m = python_tests_metric(prediction_field="solution", timeout_s=60)
    assert m(ex, dspy.Prediction(solution="def add(a, b):\n    return a + b\n")).score == 1.0
    assert "no field 'solution'" in m(ex, dspy.Prediction(code="def add(a, b):\n    return a + b\n")).feedback
