"""Class G of issue 12, Python half: the Python metrics return a score for any prediction text.

Lone surrogates, a 100,000-operator expression, NUL bytes and binary junk made `python_tests_metric`
raise (UnicodeEncodeError, MemoryError in the entry-point check); each must now score 0 with
feedback, through the real sandbox, and a correct answer next to them still scores 1.
"""

from __future__ import annotations

import sys

import dspy
import pytest

from dspy_hero.metrics.python import ds_outputs_metric, python_tests_metric

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")

TESTS = ("import unittest\nclass TestCases(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(task_func(1, 2), 3)\n")
DS_GT = "def task_func(x):\n    return x + 1\n"
DS_SCRIPT = "def test_case_input_generator(n=200):\n    return [(i,) for i in range(n)]\n"

HOSTILE = {
    "lone surrogate": "def task_func(a, b):\n    return '\ud800'\n",
    "surrogate in a fence": "```python\n\udfff\n```",
    "huge literal": "x = " + "-" * 100000 + "1",
    "deep nesting": "x = " + "(" * 5000 + "1" + ")" * 5000,
    "NUL bytes": "def task_func(a, b):\n    return a\x00 + b\n",
    "binary junk": bytes(range(256)).decode("latin-1") * 20,
    "only a fence": "```python\n```",
    "a long line": "#" * 2_000_000,
}


@pytest.fixture(scope="module")
def metrics():
    return (python_tests_metric(timeout_s=20),
            ds_outputs_metric(num_cases=3, timeout_s=60))


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_g_python_metrics_score_hostile_text(metrics, name):
    tests_metric, ds_metric = metrics
    text = HOSTILE[name]
    gold = dspy.Example(test_code=TESTS, entry_point="task_func", code_prompt="def task_func(a, b):\n").with_inputs()
    verdict = tests_metric(gold, dspy.Prediction(code=text))
    assert verdict.score == 0.0 and isinstance(verdict.feedback, str) and verdict.feedback
    ds_gold = dspy.Example(ground_truth_code=DS_GT, test_script=DS_SCRIPT).with_inputs()
    ds_verdict = ds_metric(ds_gold, dspy.Prediction(code=text))
    assert ds_verdict.score == 0.0 and isinstance(ds_verdict.feedback, str) and ds_verdict.feedback


def test_g_correct_answers_still_score_one(metrics):
    tests_metric, ds_metric = metrics
    gold = dspy.Example(test_code=TESTS, entry_point="task_func").with_inputs()
    assert tests_metric(gold, dspy.Prediction(code="def task_func(a, b):\n    return a + b\n")).score == 1.0
    ds_gold = dspy.Example(ground_truth_code=DS_GT, test_script=DS_SCRIPT).with_inputs()
    assert ds_metric(ds_gold, dspy.Prediction(code="def task_func(y):\n    return 1 + y\n")).score == 1.0


def test_g_non_string_predictions(metrics):
    tests_metric, ds_metric = metrics
    gold = dspy.Example(test_code=TESTS).with_inputs()
    ds_gold = dspy.Example(ground_truth_code=DS_GT, test_script=DS_SCRIPT).with_inputs()
    for pred in (None, 42, b"\xff\xfe", dspy.Prediction(code=None), {"code": ["not", "text"]}, object()):
        assert tests_metric(gold, pred).score == 0.0
        assert ds_metric(ds_gold, pred).score == 0.0
