"""Property: `python_tests_metric` and `ds_outputs_metric` return a score in [0, 1] with feedback for
ANY prediction text (issue 12, item 7), through the real sandbox. Few examples (each one runs real
sandboxed processes), biased towards what broke them: surrogates, huge expressions, code fences."""

from __future__ import annotations

import sys

import dspy
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dspy_hero.metrics.python import ds_outputs_metric, python_tests_metric

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox layers need Linux")

TESTS = ("import unittest\nclass TestCases(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(task_func(1, 2), 3)\n")
GOLD = dspy.Example(test_code=TESTS, entry_point="task_func", code_prompt="def task_func(a, b):\n").with_inputs()
DS_GOLD = dspy.Example(ground_truth_code="def f(x):\n    return x * 2\n",
                       test_script="def test_case_input_generator(n=200):\n    return [(i,) for i in range(n)]\n"
                       ).with_inputs()

TESTS_METRIC = python_tests_metric(timeout_s=10)
DS_METRIC = ds_outputs_metric(num_cases=2, timeout_s=30)

texts = st.one_of(
    st.text(max_size=300),  # any code points, lone surrogates included
    st.builds(lambda body: "```python\n" + body + "\n```", st.text(max_size=200)),
    st.builds(lambda op, n: "x = " + op * n + "1", st.sampled_from(["-", "~", "not ", "+"]),
              st.integers(1000, 60000)),
    st.builds(lambda n: "x = " + "[" * n + "]" * n, st.integers(100, 3000)),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_python_tests_metric_never_raises(text):
    result = TESTS_METRIC(GOLD, dspy.Prediction(code=text))
    assert 0.0 <= result.score <= 1.0 and isinstance(result.feedback, str)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_ds_outputs_metric_never_raises(text):
    result = DS_METRIC(DS_GOLD, dspy.Prediction(code=text))
    assert 0.0 <= result.score <= 1.0 and isinstance(result.feedback, str)
