"""HeroRefine on the real Python sandbox, with scripted LMs: visible examples are the evidence."""

from __future__ import annotations

import dspy
import pytest

python_probes = pytest.importorskip(
    "dspy_hero.execution.python_environment", reason="dspy_hero.execution.python_environment (Python helper) missing"
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


SUMS_ALL = "def sum_even(xs):\n    return sum(xs)\n"  # runs its example without raising, prints 10, not 6


def _python_refiner(**kwargs):
    sandbox = PythonSandbox(timeout_s=20.0)
    return HeroRefine(GenerateProgram("python", ["prompt"]),
                      environment=lambda refs: environment_for(refs, sandbox=sandbox), **kwargs)


@pytest.mark.parametrize("judge_sees_it", [True, False])
def test_a_visible_example_that_prints_something_else_makes_the_program_suspect(judge_sees_it):
    def judge(req):  # supports the fix only when the evidence names the differing output
        named = "the prompt shows `6`" in req.inputs["evidence"] and judge_sees_it
        return {"reason": "example 1 prints 10, the prompt shows 6" if named else "no evidence", "supported": named}

    script = RoleScript(
        generator={"code": SUMS_ALL},
        refiner=[{"action": "revise", "argument": "only even numbers"}, {"action": "stop", "argument": ""}],
        reviser={"reason": "example 1 prints 10; the prompt shows 6", "revised_program": FIXED},
        judge=judge,
    )
    with dspy.context(lm=script.lm()):
        pred = _python_refiner(only_failing=True)(Trap())
    trace = pred.refinement
    # no exception anywhere, yet the program is refined: its example's output differs from the prompt's
    assert trace.initial_suspicions and "prints `10`" in trace.initial_suspicions[0]
    assert "the prompt shows `6`" in script.seen["reviser"][0].inputs["diagnosis"]
    # a differing output is suspect, not failing (docstrings show random outputs too): the judge decides
    verdict = trace.steps[1].verdict
    assert verdict.stage == "judge" and script.count("judge") == 1
    assert verdict.accepted == judge_sees_it and pred.changed == judge_sees_it


def test_only_failing_leaves_a_program_whose_examples_print_what_the_prompt_shows():
    script = RoleScript(generator={"code": FIXED}, refiner={"action": "stop", "argument": ""})
    with dspy.context(lm=script.lm()):
        pred = _python_refiner(only_failing=True)(Trap())
    assert "refiner" not in script.seen and pred.refinement.initial_suspicions == []
    assert pred.refinement.stop_reason.startswith("initial program is not suspect")


def test_the_cli_builds_its_demo_bank_verified_by_the_task_metric(tmp_path):
    """A reference that runs its visible example but fails its tests is no verified example: the CLI
    (like the harness and the notebooks) keeps only what the task metric passes."""
    from dspy_hero.cli.pipeline import RunConfig, StagedRun
    from dspy_hero.refine.demos import verified_demo_bank
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-python")
    base = task.train[0]  # parse_duration, with its hidden tests
    good = base.copy(canonical_solution=_PARSE_DURATION)
    bad = base.copy(canonical_solution="def parse_duration(text):\n    return 5415\n", prompt=base.prompt + " (copy)")
    task.train = [good, bad]
    lm = RoleScript().lm()
    refiner = StagedRun(task, lm, lm, RunConfig(out_dir=tmp_path, test_limit=1)).refiner(task.make_program())
    assert [d.program for d in refiner.demo_bank.demos] == [_PARSE_DURATION]
    assert refiner.demo_bank.stats == {"considered": 2, "failed_metric": 1, "kept": 1}
    # bare execution would have kept both: the wrong one runs its example without raising
    assert len(HeroRefine(task.make_program(), environment=task.environment_for, demos=[good, bad]).demo_bank) == 2
    with pytest.raises(TypeError, match="metric"):
        verified_demo_bank([good], None)


def test_an_empty_verified_bank_is_announced(caplog):
    from dspy_hero.refine.demos import verified_demo_bank
    from dspy_hero.tasks.registry import load_task

    task = load_task("builtin-python")  # no reference programs at all
    with caplog.at_level("WARNING"):
        bank = verified_demo_bank(task.train[:3], task.metric)
    assert len(bank) == 0 and bank.stats["no_program"] == 3
    assert "without retrieved examples" in caplog.text and "from_program" in caplog.text


_PARSE_DURATION = '''import re


def parse_duration(text: str) -> int:
    m = re.fullmatch(r"(?:(\\d+)h)?(?:(\\d+)m)?(?:(\\d+)s)?", text)
    if not text or m is None or not any(m.groups()):
        raise ValueError(text)
    h, mi, s = (int(g) if g else 0 for g in m.groups())
    return h * 3600 + mi * 60 + s
'''


def test_the_last_action_revises_a_program_whose_visible_example_raises():
    script = RoleScript(generator={"code": WRONG}, refiner={"action": "stop", "argument": ""},
                        reviser={"reason": "example 1 raises AttributeError", "revised_program": FIXED})
    with dspy.context(lm=script.lm()):
        pred = _python_refiner(budget=1)(Trap())
    assert "refiner" not in script.seen and script.count("reviser") == 1  # a failing program: no time to look
    assert pred.code == FIXED.strip() and pred.refinement.steps[1].verdict.stage == "checks"
    # a program that merely prints something else is not forced: the refiner decides (and stops)
    script = RoleScript(generator={"code": SUMS_ALL}, refiner={"action": "stop", "argument": ""})
    with dspy.context(lm=script.lm()):
        pred = _python_refiner(budget=1)(Trap())
    assert script.count("refiner") == 1 and "reviser" not in script.seen and not pred.changed
