"""Python diagnosis facts, from real runs in the sandbox against the prompt's visible examples."""

from __future__ import annotations

import pytest

from dspy_hero.diagnosis import Category, Diagnoser, diagnose
from dspy_hero.execution.python import PythonSandbox
from dspy_hero.execution.python_environment import PythonEnvironment

PROMPT = '''import math
def task_func(values):
    """Sum the floors of the values.

    >>> task_func([1.5, 2.5])
    3
    >>> task_func([])
    0
    """
'''


@pytest.fixture(scope="module")
def env():
    return PythonEnvironment(PythonSandbox(timeout_s=20), prompt=PROMPT, entry_point="task_func")


def facts(env, code):
    d = diagnose("python", {}, code, environment=env)
    first: dict = {}
    for fact in d.facts:
        first.setdefault(fact.category, fact.text)
    return d, first


def test_a_correct_program_gets_no_fact(env):
    d, f = facts(env, "import math\ndef task_func(values):\n    return sum(math.floor(v) for v in values)\n")
    assert f == {} and d.structure == "defines `task_func`; imports math"


def test_exception_type_and_the_program_line_that_raised(env):
    code = "def task_func(values):\n    total = 0\n    return total + values[0]\n"
    d, f = facts(env, code)
    assert d.primary is Category.EXAMPLE_RAISES
    assert f[Category.EXAMPLE_RAISES] == ("visible example 2 (`task_func([])`) raises IndexError at line 3 "
                                          "(`return total + values[0]`): list index out of range")


def test_visible_example_whose_output_differs_from_the_prompt(env):
    _, f = facts(env, "def task_func(values):\n    return sum(values)\n")
    assert f[Category.EXAMPLE_OUTPUT_DIFFERS] == ("visible example 1 (`task_func([1.5, 2.5])`) prints `4.0`; "
                                                  "the prompt shows `3`")


def test_load_error_with_its_line(env):
    _d, f = facts(env, "import math\nimport no_such_module_xyz\ndef task_func(values):\n    return 0\n")
    assert f == {Category.LOAD_ERROR: "ModuleNotFoundError at line 2 (`import no_such_module_xyz`) while loading "
                                      "the program: No module named 'no_such_module_xyz'"}


def test_syntax_error_and_missing_entry_point_are_read_from_the_text(env):
    d, f = facts(env, "def task_func(values)\n    return 0\n")
    assert f == {Category.SYNTAX_ERROR: "SyntaxError at line 1: expected ':' (`def task_func(values)`)"}
    d, f = facts(env, "def solve(values):\n    return 0\n")
    assert d.primary is Category.MISSING_ENTRY_POINT
    assert f[Category.MISSING_ENTRY_POINT] == "the program does not define `task_func` (it defines `solve`)"
    assert f[Category.EXAMPLE_RAISES].startswith("visible example 1 (`task_func([1.5, 2.5])`) raises NameError in the example itself")


def test_a_program_that_loops_is_told_by_the_sandbox():
    env = PythonEnvironment(PythonSandbox(timeout_s=3), prompt=PROMPT, entry_point="task_func")
    d, _f = facts(env, "def task_func(values):\n    while True:\n        pass\n")
    assert d.primary is Category.TIMEOUT


def test_a_case_the_metric_saw_time_out_is_not_run_again(env):
    d = diagnose("python", {}, "def task_func(values):\n    while True:\n        pass\n", environment=env,
                 feedback="failed: Timeout: ran past 30 s (a timeout scores 0)")
    assert d.facts[0].category is Category.TIMEOUT and "not re-run" in d.facts[0].text


def test_environment_from_the_case_fields_shares_one_sandbox():
    with Diagnoser() as dg:
        d = dg.diagnose(None, {"prompt": PROMPT, "entry_point": "task_func", "test_code": "assert False"},
                        "def task_func(values):\n    return -1\n")
        assert dg._sandbox is not None
    assert d.language == "python" and d.primary is Category.EXAMPLE_OUTPUT_DIFFERS
    assert "assert False" not in d.line()
