"""`evaluate_program`: per-example outcomes under the caller's DSPy context (scripted LMs, no model)."""

from __future__ import annotations

import dspy

from dspy_hero.lm.scripted import scripted_lm
from dspy_hero.tasks.evaluate import evaluate_program

EXAMPLES = [dspy.Example(question=f"q{i}", answer="x").with_inputs("question") for i in range(4)]


def exact(gold, pred, *rest):
    return float(pred.answer == gold.answer)


def test_examples_run_under_the_callers_dspy_context():
    lm = scripted_lm(lambda req: {"answer": "x"})
    with dspy.context(lm=lm):  # no lm= argument: the caller's configured LM is the one to use
        report = evaluate_program(dspy.Predict("question -> answer"), EXAMPLES, exact, num_threads=2)
    assert [o.error for o in report.outcomes] == [None] * len(EXAMPLES)
    assert report.pass_at_1 == 1.0



def test_lm_usage_is_exact_beyond_the_history_cap():
    lm = scripted_lm(lambda req: {"answer": "x"})
    lm("warm-up")  # calls made before the evaluation are not its own
    with dspy.context(max_history_size=2):  # DSPy drops older history entries past the cap
        report = evaluate_program(dspy.Predict("question -> answer"), EXAMPLES, exact, lm=lm, num_threads=2)
    assert len(lm.history) == 2 and report.lm_calls == len(EXAMPLES)
