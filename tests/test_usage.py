"""The one usage record and meter (dspy_hero.lm.usage): arithmetic, thread safety, the usage-tracker
protocol as DSPy calls it, and that no other module grows its own meter."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import dspy

from dspy_hero.lm.scripted import scripted_lm
from dspy_hero.lm.usage import CountingHistory, Usage, UsageMeter, token_counts, track_usage, usage_of
from dspy_hero.optimizer.result import HeroResult

ROOT = Path(__file__).resolve().parents[1]


def test_usage_arithmetic_and_record():
    a, b = Usage(3, 100, 20), Usage(1, 40, 5)
    assert a + b == Usage(4, 140, 25) and a - b == Usage(2, 60, 15) and (a + b).tokens == 165
    assert a.to_dict() == {"calls": 3, "input_tokens": 100, "output_tokens": 20}
    assert Usage.from_dict(a.to_dict()) == a and Usage.from_dict(None) == Usage() == Usage.from_dict({})


def test_token_counts_reads_every_usage_shape():
    assert token_counts({"prompt_tokens": 7, "completion_tokens": 2}) == (7, 2)
    assert token_counts({"input_tokens": 5, "output_tokens": 1}) == (5, 1)
    assert token_counts(Usage(1, 9, 4)) == (9, 4)
    assert token_counts(None) == (0, 0) and token_counts({"prompt_tokens": None}) == (0, 0)
    assert token_counts([("prompt_tokens", 3)]) == (3, 0) and token_counts(object()) == (0, 0)


def test_meter_is_exact_under_threads():
    meter = UsageMeter(Usage(1, 1, 1))

    def work():
        for _ in range(500):
            meter.add_usage("m", {"prompt_tokens": 2, "completion_tokens": 1})
            meter.add(Usage(0, 1, 0))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert meter.total == Usage(1 + 4000, 1 + 4000 * 3, 1 + 4000)


def test_meter_counts_the_calls_dspy_reports_to_its_usage_tracker():
    lm = scripted_lm(lambda req: {"answer": "x"})
    meter = UsageMeter()
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm, usage_tracker=meter):
        predict(question="a")
        predict(question="b")
    outside = usage_of(lm)
    assert meter.total.calls == 2 and meter.total.input_tokens > 0 and outside.calls == 2
    assert (meter.total.input_tokens, meter.total.output_tokens) == (outside.input_tokens, outside.output_tokens)


def test_counting_history_keeps_counting_past_the_cap():
    lm = track_usage(scripted_lm(lambda req: {"answer": "x"}))
    assert isinstance(lm.history, CountingHistory) and track_usage(lm).history is lm.history
    with dspy.context(lm=lm, max_history_size=1):
        for q in "abc":
            dspy.Predict("question -> answer")(question=q)
    assert len(lm.history) == 1 and usage_of(lm).calls == 3


def test_result_json_keeps_its_usage_keys():
    res = HeroResult(task_lm=Usage(2, 30, 4), reflection_lm=Usage(1, 10, 2))
    data = res.to_dict()
    assert data["task_lm"] == {"calls": 2, "input_tokens": 30, "output_tokens": 4}
    back = HeroResult.from_dict(data)
    assert back.task_lm == Usage(2, 30, 4) and back.reflection_lm.tokens == 12


def test_no_other_module_defines_a_usage_meter():
    """A usage meter is anything DSPy can call as its usage tracker (`add_usage`)."""
    meters = []
    for path in sorted((ROOT / "dspy_hero").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(f, ast.FunctionDef) and f.name == "add_usage" for f in node.body
            ):
                meters.append(f"{path.relative_to(ROOT).as_posix()}:{node.name}")
    assert meters == ["dspy_hero/lm/usage.py:UsageMeter"]


def test_calls_through_copies_count_into_the_tracked_lm():
    """DSPy calls LMs through `lm.copy(...)` (fresh history); those calls are the tracked LM's too."""
    lm = track_usage(scripted_lm(lambda req: {"answer": "x"}))
    predict = dspy.Predict("question -> answer")
    with dspy.context(lm=lm):
        predict(question="a")
    hot = lm.copy(temperature=1.0, rollout_id=3)
    with dspy.context(lm=hot):
        predict(question="b")
    hotter = hot.copy(rollout_id=4)  # a copy of a copy keeps the first copy's settings
    with dspy.context(lm=hotter):
        predict(question="c")
    assert hotter.kwargs["temperature"] == 1.0 and hotter.kwargs["rollout_id"] == 4
    assert lm.kwargs.get("rollout_id") is None and len(lm.history) == 1
    assert usage_of(lm).calls == 3 and usage_of(lm).input_tokens > 0


def test_miprov2_instruction_proposals_are_counted_on_its_prompt_model():
    """MIPROv2 proposes each instruction through a copy of its prompt model: the proposal call must
    appear in the prompt model's usage (before the fix the counts held only its summary calls)."""
    from dspy.propose.grounded_proposer import GroundedProposer

    prompt_model = track_usage(scripted_lm(lambda req: {"proposed_instruction": "Answer briefly."}))
    program = dspy.Predict("question -> answer")
    trainset = [dspy.Example(question="q", answer="a").with_inputs("question")]
    proposer = GroundedProposer(prompt_model, program, trainset, use_dataset_summary=False,
                                program_aware=False, use_task_demos=False, use_instruct_history=False,
                                use_tip=False, set_tip_randomly=False, set_history_randomly=False)
    before = usage_of(prompt_model)
    instruction = proposer.propose_instruction_for_predictor(program, program, 0, None, 0, [])
    assert instruction == "Answer briefly."
    assert (usage_of(prompt_model) - before).calls == 1
