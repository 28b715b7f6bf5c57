"""The evidence gate: a revision replaces the current program only if it provably runs and the
evidence supports it.

Two stages, cheapest first. Programmatic checks (non-empty, actually changed, parses, executes
without error, within limits, the environment's own check such as Python's visible examples) need no
LM; only a revision that passes all of them is shown to the LLM judge, which decides whether each
change is motivated by the accumulated evidence rather than by a guess. A rejection never changes
the current program, so a bad proposal costs an action but cannot make the result worse.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dspy_hero.execution.base import Environment, Execution
from dspy_hero.refine.trace import GateVerdict

# A programmatic check: None when it passes, else the reason it failed.
GateCheck = Callable[[str, Execution, Environment], "str | None"]
# The judge: (evidence, old program, new program, claimed reason, new execution) -> (supported, reason).
JudgeFn = Callable[[str, str, str, str, str], "tuple[bool, str]"]
ExecuteFn = Callable[[str], Execution]


def executed_ok(program: str, execution: Execution, environment: Environment) -> str | None:
    return None if execution.ok else f"does not execute: {execution.describe()}"


def within_limits(program: str, execution: Execution, environment: Environment) -> str | None:
    return "its result hit the row/output cap (truncated)" if execution.truncated else None


def environment_check(program: str, execution: Execution, environment: Environment) -> str | None:
    """The environment's own check (SQL: returns columns; Python: the visible examples pass)."""
    passed, why = environment.check(program, execution)
    return None if passed else (why or "the environment check failed")


DEFAULT_CHECKS: tuple[GateCheck, ...] = (executed_ok, within_limits, environment_check)


def static_problem(old: str, new: str, language: str | None) -> str | None:
    """Reasons to reject without running anything: empty, unchanged, or (Python) not parseable."""
    if not new.strip():
        return "the proposal is empty"
    if " ".join(new.split()) == " ".join(old.split()):
        return "the proposal does not change the program"
    if language == "python":
        try:
            ast.parse(new)
        except SyntaxError as exc:
            return f"does not parse: SyntaxError: {exc.msg} (line {exc.lineno})"
    return None


@dataclass(frozen=True)
class EvidenceGate:
    """Programmatic checks, then (optionally) the LLM judge.

    `checks` are run in order on the proposal's execution and the first failure decides; replace
    them to tighten or loosen the gate. `judge=None` makes the gate purely programmatic.
    `judge_when_failing=False` skips the judge when the current program fails its own checks: the
    evidence already questions it, and a revision passing every check cannot turn a pass into a failure.
    """

    checks: Sequence[GateCheck] = DEFAULT_CHECKS
    judge: JudgeFn | None = None
    judge_when_failing: bool = True

    def review(
        self,
        old: str,
        new: str,
        claimed_reason: str,
        evidence: str,
        environment: Environment,
        language: str | None,
        execute: ExecuteFn,
        current_passes: bool = True,
    ) -> tuple[GateVerdict, Execution | None]:
        """The verdict on `new`, and its execution when it was run (None when rejected statically).
        `current_passes`: whether the program `new` would replace passes the checks itself."""
        problem = static_problem(old, new, language)
        if problem:
            return GateVerdict(False, "checks", problem), None
        execution = execute(new)
        shown = execution.describe(max_rows=5, max_chars=800)
        for check in self.checks:
            problem = check(new, execution, environment)
            if problem:
                return GateVerdict(False, "checks", problem, execution=shown), execution
        if self.judge is None:
            return GateVerdict(True, "checks", "passed all programmatic checks", execution=shown), execution
        if not current_passes and not self.judge_when_failing:
            return GateVerdict(True, "checks", "the current program fails its checks and the revision passes all "
                                               "of them (the judge is asked only about passing programs)",
                               execution=shown), execution
        supported, reason = self.judge(evidence, old, new, claimed_reason, shown)
        verdict = GateVerdict(bool(supported), "judge", reason or ("supported" if supported else "not supported"),
                              judge_called=True, execution=shown)
        return verdict, execution
