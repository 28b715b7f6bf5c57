"""The evidence gate: a revision replaces the current program only if it provably runs and the
evidence supports it.

Two stages, cheapest first. Programmatic checks (non-empty, actually changed, parses, executes
without error, within limits, the environment's own check such as Python's visible examples) need no
LM; only a revision that passes all of them is shown to the LLM judge, which decides whether each
change is motivated by the accumulated evidence (the probes, the diagnosis and the verified examples
it is shown) rather than by a guess. A rejection never changes the current program, so a bad
proposal costs an action but cannot make the result worse.

Result-shape rules (``judge_when_failing=False``, the default; `suspect.assess` decides "failing" and
"suspect"):
- the current program *fails* its checks (an error, a failed environment check, a visible example
  that raises, a result wider than the question asks for, ...) and the revision passes every check and is not suspect (no empty result, NULL-only
  column, ...): accepted by the checks, since the evidence already condemns the current program and
  the revision removes what condemned it;
- the current program is not suspect and the revision is: rejected by the checks (it would trade a
  plausible result for a questionable one);
- otherwise the judge decides; in particular any revision of a program that passes its checks (a
  merely suspect result, such as an empty one or a visible example printing something else, can be
  right).
``judge_when_failing=True`` is the paper's exact gate: the checks, then the judge, always.
"""

from __future__ import annotations

import ast
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dspy_hero.execution.base import Environment, Execution
from dspy_hero.refine.suspect import Assessment
from dspy_hero.refine.trace import GateVerdict

logger = logging.getLogger(__name__)

# A programmatic check: None when it passes, else the reason it failed.
GateCheck = Callable[[str, Execution, Environment], "str | None"]
# The judge: (evidence, old program, new program, claimed reason, new execution) -> (supported, reason).
JudgeFn = Callable[[str, str, str, str, str], "tuple[bool, str]"]
ExecuteFn = Callable[[str], Execution]
# The assessment of a program from its execution (see `suspect.assess`).
AssessFn = Callable[[str, Execution], Assessment]


def executed_ok(program: str, execution: Execution, environment: Environment) -> str | None:
    return None if execution.ok else f"does not execute: {execution.describe()}"


def within_limits(program: str, execution: Execution, environment: Environment) -> str | None:
    return "its result hit the row/output cap (truncated)" if execution.truncated else None


def environment_check(program: str, execution: Execution, environment: Environment) -> str | None:
    """The environment's own check (SQL: returns columns; Python: the visible examples pass). A check
    that raises does not fail the program: it ran (the failure is logged)."""
    try:
        passed, why = environment.check(program, execution)
    except Exception as exc:  # noqa: BLE001 - the program ran; the check's own failure is not its fault
        logger.warning("the environment check raised (%s: %s); treated as passed", type(exc).__name__, exc)
        return None
    return None if passed else (why or "the environment check failed")


DEFAULT_CHECKS: tuple[GateCheck, ...] = (executed_ok, within_limits, environment_check)


def same_program(a: str, b: str) -> bool:
    """Equal up to whitespace: a proposal that only re-indents is no revision."""
    return " ".join(a.split()) == " ".join(b.split())


def static_problem(old: str, new: str, language: str | None) -> str | None:
    """Reasons to reject without running anything: empty, unchanged, or (Python) not parseable."""
    if not new.strip():
        return "the proposal is empty"
    if same_program(old, new):
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
    `judge_when_failing=True` is the paper's gate (the judge always decides after the checks); False
    applies the result-shape rules of the module docstring when `review` is given assessments.
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
        current: Assessment | None = None,
        assess: AssessFn | None = None,
    ) -> tuple[GateVerdict, Execution | None, Assessment | None]:
        """The verdict on `new`, its execution (None when rejected statically) and its assessment
        (None unless `assess` was given and the checks passed).

        `current_passes`: whether the program `new` would replace passes the checks itself (used
        when no assessments are given). `current`/`assess`: the current program's assessment and how
        to assess the proposal, for the result-shape rules.
        """
        problem = static_problem(old, new, language)
        if problem:
            return GateVerdict(False, "checks", problem), None, None
        execution = execute(new)
        shown = execution.describe(max_rows=5, max_chars=800)
        for check in self.checks:
            problem = check(new, execution, environment)
            if problem:
                return GateVerdict(False, "checks", problem, execution=shown), execution, None
        mine = assess(new, execution) if assess is not None else None
        if mine is not None and mine.suspect:
            shown += "\n" + "\n".join(f"SUSPECT: {s.text}" for s in mine.suspicions)
        if not self.judge_when_failing and mine is not None and current is not None:
            if current.failing and not mine.suspect:
                why = current.suspicions[0].text if current.suspicions else current.check_note
                return GateVerdict(True, "checks", f"the current program fails its checks ({why}) and the revision "
                                   "passes every check with a plausible result shape", execution=shown), execution, mine
            if mine.suspect and not current.suspect:
                return GateVerdict(False, "checks", "the revision is suspect (" + mine.suspicions[0].text
                                   + ") where the current program is not", execution=shown), execution, mine
        elif not self.judge_when_failing and not current_passes and self.judge is not None:
            return GateVerdict(True, "checks", "the current program fails its checks and the revision passes all "
                                               "of them (the judge is asked only about passing programs)",
                               execution=shown), execution, mine
        if self.judge is None:
            return GateVerdict(True, "checks", "passed all programmatic checks", execution=shown), execution, mine
        supported, reason = self.judge(evidence, old, new, claimed_reason, shown)
        verdict = GateVerdict(bool(supported), "judge", reason or ("supported" if supported else "not supported"),
                              judge_called=True, execution=shown)
        return verdict, execution, mine
