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
