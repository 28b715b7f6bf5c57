"""Scripted task and reflection LMs for the harness's `--simulate` mode, the CLI's `--lm simulated`
and the notebooks, for SQL, Cypher and Python.

This is a simulation of HERO's *mechanics*, not of a model: the LMs' behaviour is a known function
of the prompt, so every method's real loop (real programs, real execution on SQLite / the embedded
FalkorDB engine / the Python sandbox, the real metric) can be run and compared in seconds: which rules
each one adopts, how many rollouts and LM calls it spends, how often an accepted change breaks
previously solved examples. Simulated accuracies say nothing about how well any model solves the task.

The world (per language, see `simulate_worlds`): of the skills the gold program needs (SQL: COUNT,
ORDER BY, GROUP BY, JOIN, DISTINCT, a nested query; Cypher: count(), ORDER BY, DISTINCT, OPTIONAL
MATCH, WITH/aggregation, variable-length paths; Python: sorting, string handling, dates, dict
aggregation, raising on invalid input, empty input), the first in that order is the instance's main
skill, and the instance is solved only if the instructions contain that skill's rule. A "hard" ~15% of instances are never solved. One tempting rule (SQL/Cypher: "end every
query with LIMIT 1"; Python: "never raise, return None") changes nothing on some instances and breaks
others; the reflection LM proposes it regularly, so acceptance tests matter. Given an execution error
as evidence, a reviser fixes the program unless the instance is hard.
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_hero.bench.simulate_worlds import (
    SQL_WORLD,
    RuleEffectWorld,
    WorldSpec,
    gold_program,
    needs_text,
    stable_hash,
    world_spec,
)
from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm

# The SQL world's skills: name -> (what in the gold SQL needs it, the rule that teaches it, the marker
# the task LM looks for).
SKILLS: dict[str, tuple[str, str, str]] = {s.name: (s.pattern, s.rule, s.marker) for s in SQL_WORLD.skills}
_NO_ERROR = re.compile(r"\b(without (an? )?(error|exception)s?|no errors?)\b", re.IGNORECASE)
_ERROR = re.compile(r"error|exception|traceback", re.IGNORECASE)
_PY_DEF = re.compile(r"\bdef\s+([A-Za-z_]\w*)\s*\(")


def shows_error(text: str) -> bool:
    """Does this evidence report an error? ("ran without error" does not count.)"""
    return bool(_ERROR.search(_NO_ERROR.sub("", text or "")))


@dataclass
class SimulatedWorld:
    """Instance key (question, or entry point for Python) -> gold program, plus the deterministic
    behaviour rules of one language's world (thread-safe).

    `needs` maps each key to the skills it needs; by default they are read off the gold program.
    """

    gold: dict[str, str]
    hard_fraction: float = 0.15
    spec: WorldSpec = SQL_WORLD
    needs: dict[str, set[str]] | None = None
    _proposals: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 0.0 <= self.hard_fraction <= 1.0:
            raise ValueError(f"hard_fraction must be in [0, 1], got {self.hard_fraction}")
        if self.needs is None:
            self.needs = {key: self.spec.needed(gold) for key, gold in self.gold.items()}

    @classmethod
    def from_examples(cls, examples: Sequence[dspy.Example], language: str = "sql", **kw: Any) -> SimulatedWorld:
        spec = world_spec(language)
        gold, needs = {}, {}
        for ex in examples:
            key = ex.get(spec.key_field)
            if not key:
                raise ValueError(f"a {language} simulation needs examples with a {spec.key_field!r} field")
            gold[key] = gold_program(spec, ex)
            needs[key] = spec.needed(needs_text(spec, ex))
        return cls(gold, spec=spec, needs=needs, **kw)

    @property
    def language(self) -> str:
        return self.spec.language

    def hard(self, key: str) -> bool:
        return stable_hash("hard" + key) % 1000 < self.hard_fraction * 1000

    def find_key(self, text: str) -> str | None:
        """The instance a prompt is about: the longest question it contains, or (Python) the first
        function it defines whose name is an instance key."""
        if not text:
            return None
        if self.spec.key_field == "entry_point":
            return next((name for name in _PY_DEF.findall(text) if name in self.gold), None)
        hits = [q for q in self.gold if q in text]
        return max(hits, key=len) if hits else None

    def locate(self, req: ScriptedRequest) -> str | None:
        # The instance's own fields first: a reviser's prompt also lists other tasks as examples.
        for text in (req.inputs.get(self.spec.key_field), req.inputs.get("question"), req.inputs.get("prompt"),
                     req.inputs.get("task"), req.user):
            key = self.find_key(text or "")
            if key:
                return key
        return None

    def main_skill(self, key: str) -> str | None:
        """The one construct the task LM gets wrong on this instance without a rule: the first of
        the skills it needs, in the world's skill order (it knows the others). Why one: a rule then
        has an effect of its own that a paired test can see; when every needed rule had to be present
        at once, no single rule changed an answer that needed two, and only rule *sets* could learn."""
        return next((s.name for s in self.spec.skills if s.name in self.needs[key]), None)

    def _gold(self, key: str) -> str:
        gold = self.gold[key]
        return gold if self.spec.language == "python" else gold.strip().rstrip(";")

    # ------------------------------------------------------------------ task LM
    def answer(self, question: str, instructions: str) -> str:
        """The program the task LM writes for instance `question` under these instructions."""
        gold = self._gold(question)
        low = instructions.lower()
        main = self.main_skill(question)
        if self.hard(question) or (main is not None and self.spec.skill(main).marker not in low):
            return self.wrong(question, gold)
        if self.spec.harmful_marker in low:
            return self.spec.apply_harmful(gold)
        return gold

    def wrong(self, question: str, gold: str) -> str:
        # Half the failures are execution errors (feedback a reviser can act on), half wrong results.
        if stable_hash("err" + question) % 2 == 0:
            return self.spec.broken(question, gold)
        return self.spec.wrong_result(question, gold)

    def revise(self, question: str, current: str, evidence: str) -> str:
        """Execution errors shown in the evidence are fixable (unless the instance is hard); wrong
        results that execute cleanly are not, since nothing observable points at the mistake."""
        if self.spec.is_broken(current) and shows_error(evidence) and not self.hard(question):
            return self._gold(question)
        return current

    def task_script(self, req: ScriptedRequest) -> dict[str, Any] | str:
        outs = set(req.output_fields)
        field_name = self.spec.program_field
        key = self.locate(req)
        if field_name in outs and "observation" in req.inputs and key:  # ReAct revision
            return {field_name: self.revise(key, req.inputs.get("previous_program", ""), req.inputs["observation"])}
        if field_name in outs and key:  # generation
            return {field_name: self.answer(key, req.instructions)}
        if "revised_program" in outs and key:  # HERO-T reviser
            current = req.inputs.get("program", "")
            return {"reason": "(1) the execution error", "revised_program": self.revise(key, current, req.inputs.get("evidence", ""))}
        if "supported" in outs:  # HERO-T judge: supported when the revision executes cleanly
            return {"reason": "compared with the evidence", "supported": not shows_error(req.inputs.get("new_execution", ""))}
        if "action" in outs:  # HERO-T refiner: revise on an error, otherwise stop
            evidence = req.inputs.get("evidence", "")
            return {"action": "revise" if shows_error(evidence) else "stop", "argument": "fix the execution error"}
        if "chosen" in outs:
            return {"chosen": "1"}
        return {}

    # ------------------------------------------------------------------ reflection LM
    def next_rule(self, present: str) -> str:
        """Cycle through skill rules not yet present; every third proposal is the harmful rule."""
        with self._lock:
            n = next(self._proposals)
        return self.rule_for(n, present)

    def rule_for(self, n: int, present: str) -> str:
        """The `n`-th proposal's rule, given the instructions and rules already `present`."""
        low = present.lower()
        harmful = self.spec.harmful_rule
        if n % 3 == 2 and self.spec.harmful_marker not in low:
            return harmful
        missing = [s.rule for s in self.spec.skills if s.marker not in low]
        if not missing:
            return harmful
        return missing[n % len(missing)]

    def reflection_script(self, req: ScriptedRequest) -> dict[str, Any] | str:
        outs = set(req.output_fields)
        everything = req.user
        if {"preserve", "revise"} <= outs:  # HERO-O diagnosis
            failing = sorted(set(re.findall(r"\bF\d+\b", req.inputs.get("evidence", ""))), key=lambda c: int(c[1:]))[:3]
            what = {"sql": "SQL constructs", "cypher": "Cypher constructs", "python": "handling in the function"}[self.language]
            return {"preserve": "- keep what the passing cases do (P1)", "revise": f"- missing {what} ({', '.join(failing) or 'F1'})"}
        if "edits" in outs:  # HERO-O rule edits
            cites = re.findall(r"\bF\d+\b", req.inputs.get("revise", "")) or ["F1"]
            k = int(re.sub(r"\D", "", req.inputs.get("num_edits", "1")) or 1)
            present = req.inputs.get("current_rules", "") + req.inputs.get("task_instructions", "")
            rules: list[str] = []
            for _ in range(max(1, k)):
                rule = self.next_rule(present + " ".join(rules))
                if rule not in rules:
                    rules.append(rule)
            return {"edits": "\n".join(f"ADD: {r} ({cites[0]})" for r in rules)}
        if "new_instruction" in outs:  # GEPA
            current = req.inputs.get("current_instruction_doc", "")
            return {"new_instruction": f"{current}\n- {self.next_rule(current)}"}
        if "proposed_instruction" in outs:  # MIPROv2
            base = req.inputs.get("basic_instruction", "") or everything[:200]
            return {"proposed_instruction": f"{base}\n- {self.next_rule(base)}"}
        return {}


def simulated_lms(
    examples: Sequence[dspy.Example], language: str = "sql", **kw: Any
) -> tuple[dspy.LM, dspy.LM, SimulatedWorld]:
    """(task LM, reflection LM, world) for a simulation over these examples.

    `language` is "sql" (examples with question + gold_sql), "cypher" (question + gold_cypher) or
    "python" (built-in Python tasks: entry_point + test_code; the gold program is the reference
    solution from `python_reference`). `kw` goes to `SimulatedWorld` (e.g. ``hard_fraction``).
    A simulation of mechanics: see the module docstring.
    """
    world = SimulatedWorld.from_examples(examples, language=language, **kw)
    suffix = "" if language == "sql" else f"-{language}"
    return (scripted_lm(world.task_script, name=f"sim-task{suffix}"),
            scripted_lm(world.reflection_script, name=f"sim-reflection{suffix}"), world)


def effect_world_task(world: RuleEffectWorld, n: int) -> tuple[list[dspy.Example], Any]:
    """`n` examples of a rule-effect world and its metric (exact match, GEPA-style feedback)."""
    examples = [dspy.Example(question=f"Question q{i}: what is the code of item {i}?", answer=f"code-{i}")
                .with_inputs("question") for i in range(n)]

    def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
        ok = str(getattr(pred, "answer", "")).strip() == gold.answer
        return dspy.Prediction(score=float(ok), feedback="The answer is right." if ok else "The answer is wrong.")

    return examples, metric


def effect_world_lms(world: RuleEffectWorld) -> tuple[dspy.LM, dspy.LM]:
    """(task LM, reflection LM) of a rule-effect world. The task LM answers right exactly when the
    world says so for the instructions it is given; the reflection LM cites the failing cases it is
    shown and offers `world.proposals(k)` on its k-th edits call (thread-safe counter)."""
    calls = itertools.count()
    lock = threading.Lock()

    def task(req: ScriptedRequest):
        m = re.search(r"Question (q\d+):", req.inputs.get("question", ""))
        if not m:
            return {}
        key = m.group(1)
        right = world.right(key, req.instructions)
        return {"answer": f"code-{key[1:]}" if right else "unknown"}

    def reflect(req: ScriptedRequest):
        outs = set(req.output_fields)
        if {"preserve", "revise"} <= outs:
            failing = re.findall(r"### Case (F\d+)", req.inputs.get("evidence", ""))[:3] or ["F1"]
            return {"preserve": "- right answers state the code (P1)", "revise": f"- wrong codes ({', '.join(failing)})"}
        if "edits" in outs:
            cite = (re.findall(r"\bF\d+\b", req.inputs.get("revise", "")) or ["F1"])[0]
            with lock:
                k = next(calls)
            rules = world.proposals(k, req.inputs.get("current_rules", ""))
            return {"edits": "\n".join(f"ADD: {r} ({cite})" for r in rules)}
        if "rule" in outs:  # the per-case fallback proposer: nothing new to offer
            return {"rule": ""}
        return {}

    return scripted_lm(task, name="effect-task"), scripted_lm(reflect, name="effect-reflection")
