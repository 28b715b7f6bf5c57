"""Is this program suspect? Label-free signals that decide what HERO-T refines and how its gate
treats a revision.

"Failing" used to mean "raised an exception", which misses most wrong programs: on BigCodeBench 19 of
20 programs ran their docstring examples without raising although 13 failed the tests. A program is
*suspect* when what running it showed questions it:
- any language: it did not run (an error, a failed environment check, a result cut at the row cap);
- SQL and Cypher: an empty result, a column holding only NULL, and (SQL) more result columns than the
  question can be asking for; (Cypher) a label, relationship type or property the graph lacks;
- Python: a visible example raises, or prints something other than the prompt shows (the examples
  are part of the prompt, not labels).

The facts come from `dspy_hero.diagnosis` (shared with HERO-O); this module only decides which of
them make a program suspect and adds the one signal that needs the question text. Everything here
reads the program, its execution, the environment and the task's own inputs, never a label.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dspy_hero.diagnosis import Category, Diagnosis, diagnose
from dspy_hero.execution.base import Environment, Execution

logger = logging.getLogger(__name__)

# Diagnosis categories that make a program suspect (the others, e.g. a join not on a foreign key, are
# shown to the reviser as evidence but do not by themselves question a program that runs).
SUSPECT_CATEGORIES = frozenset({
    Category.EMPTY_PROGRAM, Category.SYNTAX_ERROR, Category.TIMEOUT, Category.RESOURCE_LIMIT,
    Category.REJECTED, Category.RUNTIME_ERROR, Category.ENVIRONMENT_ERROR,
    Category.LOAD_ERROR, Category.MISSING_ENTRY_POINT, Category.EXAMPLE_RAISES, Category.EXAMPLE_OUTPUT_DIFFERS,
    Category.EMPTY_RESULT, Category.NULL_COLUMN, Category.TRUNCATED_RESULT,
    Category.UNKNOWN_LABEL, Category.UNKNOWN_RELATIONSHIP, Category.UNKNOWN_PROPERTY,
    Category.TEXT_COMPARED_WITH_NUMBER,
})

# Suspicions that mean the program fails a check of its own task, not just that its result looks odd:
# a visible example raises; a Cypher query names a label, relationship type or property the graph does
# not have (Cypher's silent analogue of SQL's "no such column", which SQLite reports as an error); a SQL
# result wider than the question can ask for (on the 449 shared Spider questions it flags 1 gold
# query); a SQL text function result compared with a number (`STRFTIME('%Y', d) = 2023`: SQLite
# never finds them equal, so the condition is the same on every row; it flags none of the 449 Spider
# and 1,534 BIRD gold queries). Merely suspect, so only the judge may replace the program: an empty
# result (12 of those 449 Spider gold queries are rightly empty), a NULL-only column, and a visible
# example printing something other than the prompt shows (docstrings show random or machine-dependent
# outputs: on the BigCodeBench docstring examples it flagged 2 of 7 programs that pass the tests, 1 of
# 13 that fail them).
FAILED_CHECK_CATEGORIES = frozenset({Category.EXAMPLE_RAISES, Category.LOAD_ERROR, Category.MISSING_ENTRY_POINT,
                                     Category.UNKNOWN_LABEL, Category.UNKNOWN_RELATIONSHIP, Category.UNKNOWN_PROPERTY,
                                     Category.WRONG_COLUMN_COUNT, Category.TEXT_COMPARED_WITH_NUMBER})

# Phrases that ask for every attribute: no bound on the column count.
_ALL_COLUMNS = re.compile(r"\b(all (the )?(information|info|details|attributes|columns|fields|data)|everything|"
                          r"all about|full (record|details))\b", re.IGNORECASE)
# Each of these can add one requested item ("the name and the age", "for each stadium", ...).
_CONNECTORS = re.compile(r",|;|\band\b|\bas well as\b|\balong with\b|\btogether with\b|\bwith (their|its|the)\b|"
                         r"\bincluding\b|\b(for|in) (each|every)\b|\beach\b|\bper\b|\bby\b|\bboth\b|\brespectively\b",
                         re.IGNORECASE)


def columns_asked_at_most(question: str | None) -> int | None:
    """An upper bound on how many result columns a question can be asking for, or None when it
    gives none ("all information about ...").

    Deliberately loose: one column, plus one per connector that could join a second requested item
    ("names and ages", "for each stadium", "with their ids"). It only flags results wider than any
    reading of the question, such as ``SELECT name, MAX(capacity)`` for "Which stadium is largest?".
    """
    if not question or not question.strip() or _ALL_COLUMNS.search(question):
        return None
    return 1 + len(_CONNECTORS.findall(question))


@dataclass(frozen=True)
class Suspicion:
    """One reason a program is suspect: a diagnosis category (or None for HERO-T's own signals) and
    the line shown to the refiner, reviser and judge."""

    text: str
    category: Category | None = None


@dataclass(frozen=True)
class Assessment:
    """What execution showed about one program: did it run, did the environment's check pass, its
    diagnosis facts, and which of them make it suspect."""

    ran: bool  # executed without error
    check_passed: bool | None  # the environment's own check; None when the check itself raised
    check_note: str
    suspicions: tuple[Suspicion, ...] = ()
    diagnosis: Diagnosis | None = None
    notes: tuple[str, ...] = field(default=())  # what could not be assessed (never silent)
    result: str = ""  # the result's shape ("3 row(s) x 1 column(s) ['name']"), when it has rows

    @property
    def suspect(self) -> bool:
        return bool(self.suspicions)

    @property
    def passes_checks(self) -> bool:
        """Ran and the environment's check did not fail (a check that raised does not undo a run)."""
        return self.ran and self.check_passed is not False

    @property
    def failing(self) -> bool:
        """Fails its task's own checks: it does not run, the environment's check fails, or one of
        `FAILED_CHECK_CATEGORIES` (a visible example raises, a name the graph lacks, more columns than
        asked). A result that merely looks odd (empty, NULL-only, a visible example printing something
        else) is suspect but not failing: such programs are sometimes right, so only the judge may
        replace them."""
        return not self.passes_checks or any(s.category in FAILED_CHECK_CATEGORIES for s in self.suspicions)

    def lines(self, max_facts: int = 8) -> list[str]:
        """Diagnosis lines, one fact each: suspicions first, then the other facts, then what failed."""
        out = [f"SUSPECT: {s.text}" for s in self.suspicions]
        shown = {s.text for s in self.suspicions}
        if self.diagnosis is not None:
            out += [f"fact: {f.text}" for f in self.diagnosis.facts if f.text not in shown]
        out = out[:max_facts]
        if self.result:
            out.append(f"result: {self.result}")
        if self.diagnosis is not None and self.diagnosis.structure:
            out.append(f"structure: {self.diagnosis.structure}")
        return out + [f"(not assessed: {n})" for n in self.notes]

    def render(self) -> str:
        lines = self.lines()
        if not self.suspect:
            lines.insert(0, "no suspect signal: it runs and its result shape is plausible")
        return "\n".join(lines)


def assess(
    language: str | None,
    program: str,
    execution: Execution,
    environment: Environment,
    inputs: Mapping[str, Any],
) -> Assessment:
    """The assessment of `program` given its `execution` in `environment`; never raises.

    `inputs` are the task's label-free fields (the generator's inputs and environment references);
    the question text bounds the SQL column count. The environment's check runs here too, so one
    call gives the gate and the episode everything they decide on.
    """
    notes: list[str] = []
    try:
        passed, why = environment.check(program, execution)
        check_passed: bool | None = bool(passed)
        check_note = f"check: {'passed' if passed else 'FAILED'} ({why})"
    except Exception as exc:  # noqa: BLE001 - a check that cannot run does not undo the run
        check_passed, check_note = None, f"check could not run: {type(exc).__name__}: {exc}"
        logger.warning("HeroRefine: the environment check raised (%s: %s); the program still ran", type(exc).__name__, exc)
    diagnosis = None
    try:
        diagnosis = diagnose(language, dict(inputs), program, execution, environment=environment)
        notes += list(diagnosis.errors)
    except Exception as exc:  # noqa: BLE001 - reported, the other signals still count
        notes.append(f"diagnosis failed: {type(exc).__name__}: {str(exc)[:160]}")
        logger.warning("HeroRefine: diagnosis failed (%s: %s)", type(exc).__name__, exc)
    suspicions: list[Suspicion] = []
    if not execution.ok:
        suspicions.append(Suspicion(f"it does not run: {execution.describe(max_chars=300)}"))
    elif check_passed is False:
        suspicions.append(Suspicion(f"the environment check fails: {check_note}"))
    if diagnosis is not None:
        suspicions += [Suspicion(f.text, f.category) for f in diagnosis.facts
                       if f.category in SUSPECT_CATEGORIES and f.label_free]
    if language == "sql" and execution.ok and execution.rows is not None:
        bound = columns_asked_at_most(str(inputs.get("question") or "") or None)
        if bound is not None and execution.column_count > bound:
            suspicions.append(Suspicion(
                f"it returns {execution.column_count} columns {list(execution.columns or ())} but the question asks "
                f"for at most {bound}", Category.WRONG_COLUMN_COUNT))
    result = ""
    if execution.ok and execution.rows is not None:
        result = f"{execution.row_count} row(s) x {execution.column_count} column(s)" + (
            f" {list(execution.columns)}" if execution.columns else "")
    return Assessment(execution.ok, check_passed, check_note, tuple(_unique(suspicions)), diagnosis, tuple(notes),
                      result)


def _unique(items: list[Suspicion]) -> list[Suspicion]:
    seen: set[str] = set()
    out = []
    for s in items:
        if s.text not in seen:
            seen.add(s.text)
            out.append(s)
    return out
