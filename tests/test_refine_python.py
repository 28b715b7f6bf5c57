"""HeroRefine on the real Python sandbox, with scripted LMs: visible examples are the evidence."""

from __future__ import annotations

import dspy
import pytest

python_probes = pytest.importorskip(
    "dspy_hero.execution.python_probes", reason="dspy_hero.execution.python_probes (Python helper) missing"
)

from refine_scripts import RoleScript

from dspy_hero.execution.environments import environment_for
from dspy_hero.execution.python import PythonSandbox
from dspy_hero.refine.module import HeroRefine
from dspy_hero.refine.trace import EXECUTE, PROBE, REVISE
from dspy_hero.tasks.programs import GenerateProgram

PROMPT = '''Return the sum of the even numbers in a list of integers.

def sum_even(xs):
    """Sum of the even numbers.

    >>> sum_even([1, 2, 3, 4])
    6
    """
'''
WRONG = "def sum_even(xs):\n    return sum(x for x in xs if x.is_even())\n"
MISNAMED = "def sumEven(xs):\n    return sum(x for x in xs if x % 2 == 0)\n"
FIXED = "def sum_even(xs):\n    return sum(x for x in xs if x % 2 == 0)\n"


class Trap:
    """A Python instance whose hidden tests raise when read."""

    prompt = PROMPT
    entry_point = "sum_even"

    @property
    def test_code(self):
        raise AssertionError("the hidden tests were read")


def test_python_error_from_the_visible_example_is_fixed_in_the_sandbox():
    script = RoleScript(
        generator={"code": f"```python\n{WRONG}```"},
        refiner=[{"action": "probe", "argument": "run_examples"},
                 {"action": "revise", "argument": "use x % 2 == 0"},
                 {"action": "revise", "argument": "keep the required name"}],
        reviser=[{"reason": "AttributeError", "revised_program": MISNAMED},
                 {"reason": "[0] int has no is_even; the entry point is sum_even", "revised_program": FIXED}],
        judge={"reason": "the example raised AttributeError; the fix uses modulo", "supported": True},
    )
    sandbox = PythonSandbox(timeout_s=20.0)
    refiner = HeroRefine(GenerateProgram("python", ["prompt"]),
                         environment=lambda refs: environment_for(refs, sandbox=sandbox))
    with dspy.context(lm=script.lm()):
        pred = refiner(Trap())
    trace = pred.refinement
    assert [s.action for s in trace.steps] == [EXECUTE, PROBE, REVISE, REVISE]
    assert "AttributeError" in trace.steps[0].evidence and "AttributeError" in trace.steps[1].evidence
    misnamed = trace.steps[2].verdict
    assert not misnamed.accepted and misnamed.stage == "checks" and "sum_even" in misnamed.reason
    accepted = trace.steps[3].verdict
    # the visible example raised, the revision passes it: the checks decide, no judge call
    assert accepted.accepted and not accepted.judge_called and "6" in accepted.execution
    assert script.count("judge") == 0  # a failing program replaced by one that passes every check
    assert pred.code == FIXED.strip() and pred.changed
    assert trace.env_actions == 4 and trace.actions_used == 3
