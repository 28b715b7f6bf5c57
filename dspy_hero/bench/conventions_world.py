"""The scripted simulation for the conventions task (`hero demo --lm simulated` on ``builtin-conventions``).

Like `simulate`, a simulation of HERO's mechanics, not of a model — but its skills are the *convention
kinds* of `conventions_data` rather than SQL constructs, and its wrong programs are the real naive SQL
of the task: for each question the scripted task LM honours exactly the kinds whose rule is in its
instructions and ignores the others (``Question.sql_ignoring``), so a missing rule produces the query a
convention-unaware writer would run, which executes cleanly and answers wrongly, as on the real task.
Each rule is written in general terms (it names no database's spelling), so a rule adopted on the
optimization databases is what makes held-out questions on the evaluation databases right. The
reflection LM reads the evidence it is shown: its diagnosis names, for the failing cases in it, the
conventions their questions need and the current rules lack (most frequent first), and its edits add
those kinds' rules; every third proposal is instead the tempting harmful rule of the SQL world ("end
every query with LIMIT 1"), so the acceptance test has something to refuse. A hard ~15% of questions
are never solved, as in `simulate`.

Call `conventions_simulated_lms(task.train + task.test)` where `simulated_lms` would be called.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_hero.bench.simulate import SimulatedWorld
from dspy_hero.bench.simulate_worlds import SQL_WORLD, Skill, WorldSpec
from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm
from dspy_hero.tasks.builtin.conventions_data import DATABASES, ConventionDB, Kind, following
from dspy_hero.tasks.builtin.conventions_tasks import TEMPLATE_BY_NAME, Dialect

# One general rule per kind, and the marker the scripted task LM looks for in its instructions.
CONVENTION_SKILLS: tuple[Skill, ...] = (
    Skill(Kind.MONEY.value, "", "Amounts may be stored as integers in minor units (cents, fils): check sample values "
          "and convert to the currency unit the question asks for.", "minor units"),
    Skill(Kind.FLAG.value, "", "Yes/no columns may hold text such as 'Y'/'N' or 'true'/'false': check sample values "
          "before filtering on them.", "yes/no columns"),
    Skill(Kind.SOFT_DELETE.value, "", "Rows whose deletion timestamp (deleted_at, removed_at, ...) is set no longer "
          "exist: exclude them wherever the table is read.", "deletion timestamp"),
    Skill(Kind.DATE_FORMAT.value, "", "Dates may be stored as text in a local format (DD/MM/YYYY, YYYYMMDD): check "
          "sample values and compare or sort by year, month and day with substr.", "local format"),
    Skill(Kind.STATUS_CODE.value, "", "Status columns may hold codes ('D', 'DLV', 'Delivered'): check sample values "
          "and match the stored code of the word in the question.", "status columns"),
    Skill(Kind.COUNTRY_CODE.value, "", "Countries may be stored as codes (DE, DEU, GER): check sample values and match "
          "the stored code, not the name.", "countries may be stored as codes"),
    Skill(Kind.UNIT.value, "", "Measures may be stored in a smaller unit (grams, seconds, millimetres): convert to the "
          "unit the question asks for.", "smaller unit"),
)

CONVENTIONS_WORLD: WorldSpec = dataclasses.replace(SQL_WORLD, skills=CONVENTION_SKILLS)
_CASE = re.compile(r"### Case (F\d+) \(FAILED")
_KIND_NAMES = re.compile(r"\b(" + "|".join(k.value for k in Kind) + r")\b")


@dataclass
class ConventionsWorld(SimulatedWorld):
    """`SimulatedWorld` whose task LM ignores exactly the conventions it has no rule for.

    `programs` maps a question to (its database's spec, template name, parameters), enough to render
    its SQL with any set of kinds ignored.
    """

    spec: WorldSpec = CONVENTIONS_WORLD
    programs: dict[str, tuple[ConventionDB, str, dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def from_examples(cls, examples: Sequence[dspy.Example], language: str = "sql", **kw: Any) -> ConventionsWorld:
        if language != "sql":
            raise ValueError(f"the conventions world is a SQL world, not {language!r}")
        gold, needs, programs = {}, {}, {}
        for ex in examples:
            for name in ("question", "gold_sql", "conventions", "db_id", "template", "params"):
                if ex.get(name) is None:
                    raise ValueError(f"a conventions simulation needs builtin-conventions examples; {name!r} is missing")
            gold[ex.question] = ex.gold_sql
            needs[ex.question] = set(ex.conventions)
            follows = ex.get("follows")  # a variant that follows fewer conventions (conventions_data.following)
            programs[ex.question] = (following(DATABASES[ex.db_id], None if follows is None else
                                               frozenset(Kind(k) for k in follows)), ex.template, dict(ex.params))
        return cls(gold, needs=needs, programs=programs, **kw)

    def sql_ignoring(self, question: str, kinds: set[str]) -> str:
        db, template, params = self.programs[question]
        return TEMPLATE_BY_NAME[template].sql(Dialect(db, frozenset(Kind(k) for k in kinds)), params)

    def answer(self, question: str, instructions: str) -> str:
        gold = self._gold(question)
        low = instructions.lower()
        if self.hard(question):
            return self.wrong(question, gold)
        missing = {s for s in self.needs[question] if self.spec.skill(s).marker not in low}
        program = self.sql_ignoring(question, missing) if missing else gold
        return self.spec.apply_harmful(program) if self.spec.harmful_marker in low else program

    # ------------------------------------------------------------------ reflection LM
    def missing(self, question: str, present: str) -> list[str]:
        low = present.lower()
        return sorted(k for k in self.needs[question] if self.spec.skill(k).marker not in low)

    def failing_cases(self, evidence: str) -> list[tuple[str, str]]:
        """(case id, question) of every failing case block in the evidence."""
        out = []
        for block in re.split(r"(?=### Case )", evidence or ""):
            match = _CASE.match(block)
            key = self.find_key(block) if match else None
            if key:
                out.append((match.group(1), key))
        return out

    def _proposal(self) -> int:
        with self._lock:
            return next(self._proposals)

    def reflection_script(self, req: ScriptedRequest) -> dict[str, Any] | str:
        outs = set(req.output_fields)
        present = req.inputs.get("task_instructions", "") + "\n" + req.inputs.get("current_rules", "")
        if {"preserve", "revise"} <= outs:  # HERO-O diagnosis: the conventions the failing cases lack
            cited: dict[str, list[str]] = {}
            for case_id, question in self.failing_cases(req.inputs.get("evidence", "")):
                for kind in self.missing(question, present):
                    cited.setdefault(kind, []).append(case_id)
            if cited:
                ranked = sorted(cited.items(), key=lambda kv: (-len(kv[1]), kv[0]))
                revise = "\n".join(f"- the query ignores how the database stores {kind} ({', '.join(ids[:3])})"
                                   for kind, ids in ranked)
                return {"preserve": "- keep what the passing cases do (P1)", "revise": revise}
        if "edits" in outs:  # HERO-O rule edits: the rules of the kinds the diagnosis named
            wanted = []
            for line in req.inputs.get("revise", "").splitlines():
                for kind in _KIND_NAMES.findall(line):
                    cites = re.findall(r"\bF\d+\b", line) or ["F1"]
                    if kind not in [w for w, _ in wanted]:
                        wanted.append((kind, cites[0]))
            if wanted:
                k = max(1, int(re.sub(r"\D", "", str(req.inputs.get("num_edits", "1"))) or 1))
                low, edits = present.lower(), []
                fresh = [(kind, cite) for kind, cite in wanted if self.spec.skill(kind).marker not in low]
                for _ in range(k):
                    if self._proposal() % 3 == 2 and self.spec.harmful_marker not in low:
                        rule, cite = self.spec.harmful_rule, wanted[0][1]
                    elif fresh:
                        kind, cite = fresh.pop(0)
                        rule = self.spec.skill(kind).rule
                    else:
                        continue
                    if rule not in [r for r, _ in edits]:
                        edits.append((rule, cite))
                if edits:
                    return {"edits": "\n".join(f"ADD: {rule} ({cite})" for rule, cite in edits)}
        if "rule" in outs:  # one rule from one failing case
            key = self.find_key(req.inputs.get("failing_case", ""))
            kinds = self.missing(key, present) if key else []
            if kinds:
                return {"rule": self.spec.skill(kinds[0]).rule}
        return super().reflection_script(req)


def conventions_simulated_lms(examples: Sequence[dspy.Example], **kw: Any) -> tuple[dspy.LM, dspy.LM, ConventionsWorld]:
    """(task LM, reflection LM, world) over ``builtin-conventions`` examples; `kw` goes to the world
    (e.g. ``hard_fraction``). A simulation of mechanics: see the module docstring."""
    world = ConventionsWorld.from_examples(examples, **kw)
    return (scripted_lm(world.task_script, name="sim-task-conventions"),
            scripted_lm(world.reflection_script, name="sim-reflection-conventions"), world)
