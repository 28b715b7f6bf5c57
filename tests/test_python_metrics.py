"""python_tests_metric and ds_outputs_metric on small handwritten tasks, through the real sandbox."""

from __future__ import annotations

import dspy
import pytest

from dspy_hero.metrics.base import score_of
from dspy_hero.metrics.infer import infer_metric
from dspy_hero.metrics.python import calibrated_program, ds_outputs_metric, python_tests_metric

CODE_PROMPT = "import math\ndef task_func(values):\n"
TESTS = """import unittest
class TestCases(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(task_func([1, 2, 3]), 6)
    def test_empty(self):
        self.assertEqual(task_func([]), 0)
    def test_floor(self):
        self.assertEqual(task_func([1.5, 2.5]), 3)
"""


def _task(**extra) -> dspy.Example:
    fields = {"prompt": "Sum the floors of the values.", "code_prompt": CODE_PROMPT, "entry_point": "task_func",
              "test_code": TESTS}
    fields.update(extra)
    return dspy.Example(**fields).with_inputs("prompt", "code_prompt", "entry_point")


@pytest.fixture(scope="module")
def tests_metric():
    return python_tests_metric(timeout_s=20)


def test_correct_solution_scores_one(tests_metric):
    code = "```python\nimport math\ndef task_func(values):\n    return sum(math.floor(v) for v in values)\n```"
    result = tests_metric(_task(), dspy.Prediction(code=code))
    assert result.score == 1.0 and "all 3 unit test(s) passed" in result.feedback


def test_calibrated_mode_accepts_a_body_only_answer(tests_metric):
    body_only = "    return sum(math.floor(v) for v in values)\n"
    assert calibrated_program(body_only, CODE_PROMPT).startswith(CODE_PROMPT + "    pass\n")
    # calibrated: prompt + pass, then the candidate; a bare body is then a syntax error, but a full
    # function without the import still passes because the prompt supplied `import math`
    no_import = "def task_func(values):\n    return sum(math.floor(v) for v in values)\n"
    assert tests_metric(_task(), dspy.Prediction(code=no_import)).score == 1.0
    strict = python_tests_metric(calibrated=False, timeout_s=20)
    result = strict(_task(), dspy.Prediction(code=no_import))
    assert result.score == 0.0 and "NameError" in result.feedback


def test_calibrated_program_compiles_when_the_code_prompt_lacks_a_final_newline():
    # user data need not end with a newline as BigCodeBench's prompts do
    prompt = 'import math\ndef task_func(values):\n    """Sum the floors."""'
    program = calibrated_program("def task_func(values):\n    return 1\n", prompt)
    compile(program, "calibrated.py", "exec")
    assert calibrated_program("x = 1\n", CODE_PROMPT) == CODE_PROMPT + "    pass\nx = 1\n"


def test_wrong_solution_feedback_hides_expected_values(tests_metric):
    wrong = "def task_func(values):\n    return sum(values) + 1000\n"
    result = tests_metric(_task(), dspy.Prediction(code=wrong))
    assert result.score == 0.0
    assert "3 of 3 unit test(s) failed" in result.feedback and "AssertionError" in result.feedback
    assert "test_basic" in result.feedback
    assert "1006" not in result.feedback and "!= 6" not in result.feedback
    revealing = python_tests_metric(timeout_s=20, reveal_expected=True)
    shown = revealing(_task(), dspy.Prediction(code=wrong))
    assert shown.score == 0.0 and "1006 != 6" in shown.feedback


def test_errors_timeouts_and_missing_entry_point(tests_metric):
    raising = "def task_func(values):\n    raise KeyError('nope')\n"
    result = tests_metric(_task(), dspy.Prediction(code=raising))
    assert result.score == 0.0 and "3 error(s)" in result.feedback and "KeyError" in result.feedback

    slow = python_tests_metric(timeout_s=1.5)
    looping = "def task_func(values):\n    while True:\n        pass\n"
    timed = slow(_task(), dspy.Prediction(code=looping))
    assert timed.score == 0.0 and "Timeout" in timed.feedback

    misnamed = "def solve(values):\n    return 0\n"
    named = python_tests_metric(calibrated=False, timeout_s=20)(_task(), dspy.Prediction(code=misnamed))
    assert named.score == 0.0 and "does not define `task_func`" in named.feedback

    empty = tests_metric(_task(), dspy.Prediction(code="   "))
    assert empty.score == 0.0 and "EmptyProgram" in empty.feedback


def test_metric_signatures_and_bad_examples(tests_metric):
    code = "import math\ndef task_func(values):\n    return sum(math.floor(v) for v in values)\n"
    gold, pred = _task(), dspy.Prediction(code=code)
    assert score_of(tests_metric(gold, pred, None)) == 1.0
    assert score_of(tests_metric(gold, pred, None, "generate", None)) == 1.0  # GEPA's call shape
    with pytest.raises(KeyError, match="test_code"):
        tests_metric(dspy.Example(prompt="x"), pred)
    assert type(infer_metric([gold])).__name__ == "ExecutionMetric"
    assert infer_metric([gold]).__name__ == "python_tests_metric"


GT = """import numpy as np

def helper(x):
    return x * 2

def scale(values, factor):
    return helper(np.asarray(values, dtype=float)) * factor
"""

TEST_SCRIPT = """import numpy as np

def test_case_input_generator(n=200):
    cases = []
    for _ in range(n):
        size = np.random.randint(1, 6)
        cases.append((np.random.rand(size).tolist(), float(np.random.uniform(-2, 2))))
    return cases
"""


def _ds(gt: str = GT, script: str = TEST_SCRIPT) -> dspy.Example:
    return dspy.Example(prompt="scale", ground_truth_code=gt, test_script=script).with_inputs("prompt")


@pytest.fixture(scope="module")
def ds_metric():
    pytest.importorskip("numpy")
    return ds_outputs_metric(num_cases=30, timeout_s=60)


def test_ds_equivalent_solution_passes(ds_metric):
    other = "import numpy as np\n\ndef scale(values, factor):\n    return np.array(values) * (2.0 * factor) + 0.0\n"
    result = ds_metric(_ds(), dspy.Prediction(code=other))
    assert result.score == 1.0, result.feedback
    assert "all 30 generated" in result.feedback


def test_ds_wrong_and_raising_solutions_fail(ds_metric):
    wrong = "def scale(values, factor):\n    return [v * factor for v in values]\n"
    result = ds_metric(_ds(), dspy.Prediction(code=wrong))
    assert result.score == 0.0 and "0 of 30" in result.feedback and "first mismatch at input #0" in result.feedback
    raising = "def scale(values, factor):\n    raise ValueError('no')\n"
    bad = ds_metric(_ds(), dspy.Prediction(code=raising))
    assert bad.score == 0.0 and "raised on 30 input(s): ValueError" in bad.feedback
    broken = ds_metric(_ds(), dspy.Prediction(code="def scale(:\n"))
    assert broken.score == 0.0 and "SyntaxError" in broken.feedback


def test_ds_typed_comparison_pandas_nan_and_nested(ds_metric):
    pytest.importorskip("pandas")
    gt = ("import pandas as pd\nimport numpy as np\n\n"
          "def build(values):\n"
          "    frame = pd.DataFrame({'v': values, 'w': [np.nan] * len(values)})\n"
          "    return {'frame': frame, 'stats': (frame['v'].sum(), [float('nan'), len(values)])}\n")
    script = ("import numpy as np\n\ndef test_case_input_generator(n=200):\n"
              "    return [(np.random.rand(np.random.randint(1, 5)).tolist(),) for _ in range(n)]\n")
    same = ("import pandas as pd\nimport numpy as np\n\n"
            "def build(values):\n"
            "    frame = pd.DataFrame({'v': [v + 1e-12 for v in values], 'w': np.full(len(values), np.nan)})\n"
            "    return {'stats': [frame['v'].sum(), (np.nan, len(values))], 'frame': frame}\n")
    assert ds_metric(_ds(gt, script), dspy.Prediction(code=same)).score == 1.0
    differs = same.replace("'w': np.full", "'x': np.full")
    result = ds_metric(_ds(gt, script), dspy.Prediction(code=differs))
    assert result.score == 0.0 and "DataFrame differs" in result.feedback


def test_ds_reference_breakage_is_reported_as_such(ds_metric):
    broken_script = "def test_case_input_generator(n=200):\n    raise RuntimeError('old library')\n"
    result = ds_metric(_ds(GT, broken_script), dspy.Prediction(code=GT))
    assert result.score == 0.0 and result.feedback.startswith("failed: the reference solution could not be evaluated")


def test_ds_feedback_hides_expected_unless_asked():
    pytest.importorskip("numpy")
    wrong = "def scale(values, factor):\n    return 123456789.0\n"
    quiet = ds_outputs_metric(num_cases=3, timeout_s=60)(_ds(), dspy.Prediction(code=wrong))
    assert quiet.score == 0.0 and "array(" not in quiet.feedback
    loud = ds_outputs_metric(num_cases=3, timeout_s=60, reveal_expected=True)(_ds(), dspy.Prediction(code=wrong))
    assert "expected output there: array(" in loud.feedback
    with pytest.raises(ValueError):
        ds_outputs_metric(num_cases=0)


def test_ds_set_order_is_the_same_in_both_processes(ds_metric):
    """The candidate and the judge are two processes: with str hashing randomised per process, a
    function returning list(set(words)) would differ from itself; both runs share one hash seed."""
    gt = "def uniq(words):\n    return list(set(words))\n"
    script = ("import random\n\ndef test_case_input_generator(n=200):\n"
              "    return [([random.choice('abcdefghij') * random.randint(1, 4) for _ in range(8)],) for _ in range(n)]\n")
    assert ds_metric(_ds(gt, script), dspy.Prediction(code=gt)).score == 1.0
