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
    # DSPy trims its history without a lock, so two threads can leave one entry past the cap;
    # what matters is that entries were dropped (fewer than the 5 calls made) and the count is exact.
    assert len(lm.history) < 1 + len(EXAMPLES) and report.lm_calls == len(EXAMPLES)


# --- rollouts ordered for the prefix cache ------------------------------------------------------

INTERLEAVED = [
    dspy.Example(db_schema=f"schema-{'AB'[i % 2]}", question=f"q{i}", answer=f"a{i}").with_inputs("db_schema", "question")
    for i in range(6)
]


def echo_lm(seen: list[str]):
    """Answers each question with its own label, recording the order in which questions arrive."""

    def script(req):
        seen.append(req.inputs["question"])
        return {"answer": "a" + req.inputs["question"][1:]}

    return scripted_lm(script)


def test_examples_run_grouped_by_their_shared_input_and_come_back_in_the_original_order():
    from dspy_hero.tasks.evaluate import SharedPrefixOrder

    program = dspy.Predict("db_schema, question -> answer")
    assert SharedPrefixOrder()(program, INTERLEAVED) == [0, 2, 4, 1, 3, 5]
    seen: list[str] = []
    report = evaluate_program(program, INTERLEAVED, exact, lm=echo_lm(seen), num_threads=1)
    assert seen == ["q0", "q2", "q4", "q1", "q3", "q5"]  # one schema after the other
    assert [o.index for o in report.outcomes] == list(range(6))  # outcomes in the examples' order
    assert report.pass_at_1 == 1.0  # each outcome is its own example's (a wrong pairing would score 0)


def test_grouping_changes_no_result_and_the_given_order_is_kept_on_request():
    from dspy_hero.tasks.evaluate import given_order

    program = dspy.Predict("db_schema, question -> answer")
    half = lambda req: {"answer": "a" + req.inputs["question"][1:] if req.inputs["question"] in {"q1", "q4"} else "no"}
    grouped = evaluate_program(program, INTERLEAVED, exact, lm=scripted_lm(half), num_threads=2)
    seen: list[str] = []
    given = evaluate_program(program, INTERLEAVED, exact, lm=echo_lm(seen), num_threads=1, order=given_order)
    assert seen == [f"q{i}" for i in range(6)]
    assert grouped.scores() == [0.0, 1.0, 0.0, 0.0, 1.0, 0.0] and given.pass_at_1 == 1.0


def test_an_order_that_drops_or_repeats_examples_is_refused():
    import pytest

    program = dspy.Predict("db_schema, question -> answer")
    with pytest.raises(ValueError, match="not a permutation"):
        evaluate_program(program, INTERLEAVED, exact, lm=echo_lm([]), order=lambda p, e: [0, 0, 1, 2, 3, 4])
