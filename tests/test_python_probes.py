"""PythonEnvironment: visible examples from the prompt, run in the real sandbox; no gold anywhere."""

from __future__ import annotations

import pytest

from dspy_hero.execution.base import EMPTY_PROGRAM, RUNTIME, Environment
from dspy_hero.execution.environments import environment_for
from dspy_hero.execution.python import PythonSandbox
from dspy_hero.execution.python_environment import PythonEnvironment, extract_examples

PROMPT = '''import math
def task_func(values):
    """Sum the floors of the values.

    Example:
    >>> task_func([1.5, 2.5])
    3
    >>> task_func([])
    0
    """
'''

GOOD = "import math\ndef task_func(values):\n    return sum(math.floor(v) for v in values)\n"


@pytest.fixture(scope="module")
def sandbox():
    return PythonSandbox(timeout_s=20)


def test_extracts_doctest_heading_and_input_block_examples():
    doc = extract_examples(PROMPT, "task_func")
    assert [e.source for e in doc] == ["task_func([1.5, 2.5])", "task_func([])"]
    assert [e.shown for e in doc] == ["3", "0"]
    heading = extract_examples("Count words.\nExample:\n    count('a b')\n    n = count('')\n", "count")
    assert [e.source for e in heading] == ["count('a b')", "n = count('')"]
    ds = extract_examples(
        "The function signature:\n```python\ndef scale(values, factor):\n```\nInput:\n```python\n"
        "values = np.array([1.0, 2.0])\nfactor = 3\n```\nOutput:\n```python\narray([3., 6.])\n```\n")
    assert len(ds) == 1 and ds[0].mode == "block"
    assert ds[0].source.startswith("import numpy as np") and ds[0].source.endswith("scale(values=values, factor=factor)")
    assert ds[0].shown == "array([3., 6.])"
    assert extract_examples("no examples here", "f") == []


def test_execute_runs_program_and_examples(sandbox):
    env = PythonEnvironment(sandbox, prompt=PROMPT, entry_point="task_func")
    assert isinstance(env, Environment) and env.language == "python"
    good = env.execute("```python\n" + GOOD + "```")
    assert good.ok, good
    assert "example 1: task_func([1.5, 2.5])\n  output: 3" in good.output
    assert "the prompt shows: 3" in good.output
    passed, why = env.check(GOOD, good)
    assert passed and "2 visible example(s)" in why


def test_examples_that_raise_fail_the_gate_but_wrong_values_do_not(sandbox):
    env = PythonEnvironment(sandbox, prompt=PROMPT, entry_point="task_func")
    raising = "def task_func(values):\n    return values[0]\n"
    result = env.execute(raising)
    assert not result.ok and result.error_type == RUNTIME and "example 2 raised IndexError" in result.error_message
    assert env.check(raising, result)[0] is False
    # a wrong value is not something a label-free gate can know: it passes, with the output shown
    wrong = "def task_func(values):\n    return 42\n"
    shown = env.execute(wrong)
    assert shown.ok and "output: 42" in shown.output and "the prompt shows: 3" in shown.output
    assert env.check(wrong, shown)[0] is True


def test_gate_rejects_load_errors_and_missing_entry_point(sandbox):
    env = PythonEnvironment(sandbox, prompt=PROMPT, entry_point="task_func")
    broken = env.execute("import not_a_module_xyz\n")
    assert not broken.ok and "ModuleNotFoundError" in broken.error_message
    assert env.check("import not_a_module_xyz\n", broken)[0] is False
    plain = PythonEnvironment(sandbox, prompt="Write solve().", entry_point="solve")
    other = "def helper():\n    return 1\n"
    ran = plain.execute(other)
    assert ran.ok
    ok, why = plain.check(other, ran)
    assert not ok and "does not define `solve`" in why
    assert plain.execute("  ").error_type == EMPTY_PROGRAM


def test_probes(sandbox):
    env = PythonEnvironment(sandbox, prompt=PROMPT, entry_point="task_func")
    assert set(env.probes()) == {"run_examples", "run_snippet"}
    listing = env.probe("run_examples")
    assert "no program executed yet" in listing.text and "task_func([])" in listing.text
    env.execute(GOOD)
    snippet = env.probe("run_snippet", "print(task_func([9.9, 0.1]))")
    assert snippet.ok and "output: 9" in snippet.text
    rerun = env.probe("run_examples", "def task_func(values):\n    return -1\n")
    assert "output: -1" in rerun.text
    assert env.probe("run_snippet", "").ok is False
    assert env.probe("read_tests").ok is False


def test_environment_for_builds_a_python_environment_without_labels():
    env = environment_for({"prompt": PROMPT, "entry_point": "task_func", "test_code": "SECRET TESTS"})
    assert isinstance(env, PythonEnvironment)
    assert "SECRET" not in repr(vars(env))
    assert len(env.examples) == 2
