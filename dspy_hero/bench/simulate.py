"""Scripted task and reflection LMs for the harness's `--simulate` mode.

The simulation runs every method's real loop (real programs, real SQLite execution, real metric)
with LMs whose behaviour is a known function of the prompt, so the optimizers' *mechanics* can be
compared in seconds: which rules each one adopts, how many rollouts and LM calls it spends, how often
an accepted change breaks previously solved examples.

The world: each SQL skill the gold query needs (COUNT, ORDER BY, GROUP BY, JOIN, DISTINCT, a nested
query) is solved only if the instructions contain that skill's rule. A "hard" ~15% of questions are
never solved. One tempting rule ("end every query with LIMIT 1") fixes single-answer questions and
breaks multi-row ones; the reflection LM proposes it regularly, so acceptance tests matter. Given an
execution error as evidence, a reviser fixes the query unless the question is hard.
"""

from __future__ import annotations

import hashlib
import itertools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import dspy

from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm

# skill -> (what in the gold SQL needs it, the rule that teaches it, the marker the task LM looks for)
SKILLS: dict[str, tuple[str, str, str]] = {
    "count": (r"\bcount\s*\(", "When the question asks how many, aggregate with COUNT.", "how many"),
    "order": (r"\border\s+by\b", "When the question asks for a ranking or extreme, sort with ORDER BY.", "order by"),
    "group": (r"\bgroup\s+by\b", "When the question asks per category, use GROUP BY on that category.", "group by"),
    "join": (r"\bjoin\b", "When columns come from several tables, JOIN them on their shared key.", "join them"),
    "distinct": (r"\bdistinct\b", "When the question asks for different values, use SELECT DISTINCT.", "select distinct"),
    "nested": (r"\(\s*select\b", "When a condition depends on another query, use a nested subquery.", "nested subquery"),
}
HARMFUL_RULE = "Always end every query with LIMIT 1 to keep the answer short."
HARMFUL_MARKER = "limit 1 to keep"


def _h(text: str) -> int:
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


def skills_needed(sql: str) -> set[str]:
    return {name for name, (pattern, _, _) in SKILLS.items() if re.search(pattern, sql, re.IGNORECASE)}


@dataclass
class SimulatedWorld:
    """Question -> gold SQL lookup plus the deterministic behaviour rules (thread-safe)."""

    gold: dict[str, str]
    hard_fraction: float = 0.15
    _proposals: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_examples(cls, examples: Sequence[dspy.Example], **kw: Any) -> SimulatedWorld:
        return cls({ex.question: ex.gold_sql for ex in examples}, **kw)

    def hard(self, question: str) -> bool:
        return _h("hard" + question) % 1000 < self.hard_fraction * 1000

    def find_question(self, text: str) -> str | None:
        hits = [q for q in self.gold if q in text]
        return max(hits, key=len) if hits else None

    # ------------------------------------------------------------------ task LM
    def answer(self, question: str, instructions: str) -> str:
        gold = self.gold[question].strip().rstrip(";")
        low = instructions.lower()
        missing = [s for s in sorted(skills_needed(gold)) if SKILLS[s][2] not in low]
        if self.hard(question) or missing:
            return self.wrong(question, gold)
        if HARMFUL_MARKER in low and not re.search(r"\blimit\b", gold, re.IGNORECASE):
            return gold + " LIMIT 1"
        return gold

    def wrong(self, question: str, gold: str) -> str:
        # Half the failures are execution errors (feedback a reviser can act on), half wrong results.
        if _h("err" + question) % 2 == 0:
            return "SELEC " + gold[len("SELECT "):] if gold.upper().startswith("SELECT ") else "SELEC 1"
        return "SELECT 'no answer' WHERE 0 = 1" if _h("e" + question) % 3 else "SELECT 0"

    def revise(self, question: str, current: str, evidence: str) -> str:
        """Execution errors shown in the evidence are fixable (unless the question is hard); wrong
        results that execute cleanly are not, since nothing observable points at the mistake."""
        broken = current.strip().upper().startswith("SELEC ")
        if broken and "error" in evidence.lower() and not self.hard(question):
            return self.gold[question]
        return current

    def task_script(self, req: ScriptedRequest) -> dict[str, Any] | str:
        outs = set(req.output_fields)
        text = req.user
        question = self.find_question(text)
        if "sql" in outs and "observation" in req.inputs and question:  # ReAct revision
            return {"sql": self.revise(question, req.inputs.get("previous_program", ""), req.inputs["observation"])}
        if "sql" in outs and question:  # generation
            return {"sql": self.answer(question, req.instructions)}
        if "revised_program" in outs and question:  # HERO-T reviser
            current = req.inputs.get("program", "")
            return {"reason": "(1) the execution error", "revised_program": self.revise(question, current, req.inputs.get("evidence", ""))}
        if "supported" in outs:  # HERO-T judge: supported when the revision executes cleanly
            new_exec = req.inputs.get("new_execution", "").lower()
            return {"reason": "compared with the evidence", "supported": "error" not in new_exec}
        if "action" in outs:  # HERO-T refiner: revise on an error, otherwise stop
            evidence = req.inputs.get("evidence", "").lower()
            return {"action": "revise" if "error" in evidence else "stop", "argument": "fix the execution error"}
        if "chosen" in outs:
            return {"chosen": "1"}
        return {}

    # ------------------------------------------------------------------ reflection LM
    def next_rule(self, present: str) -> str:
        """Cycle through skill rules not yet present; every third proposal is the harmful rule."""
        with self._lock:
            n = next(self._proposals)
        low = present.lower()
        if n % 3 == 2 and HARMFUL_MARKER not in low:
            return HARMFUL_RULE
        missing = [rule for _, rule, marker in SKILLS.values() if marker not in low]
        if not missing:
            return HARMFUL_RULE
        return missing[n % len(missing)]

    def reflection_script(self, req: ScriptedRequest) -> dict[str, Any] | str:
        outs = set(req.output_fields)
        everything = req.user
        if {"preserve", "revise"} <= outs:  # HERO-O diagnosis
            failing = sorted(set(re.findall(r"\bF\d+\b", req.inputs.get("evidence", ""))), key=lambda c: int(c[1:]))[:3]
            return {"preserve": "- keep the answered columns (P1)", "revise": f"- missing SQL constructs ({', '.join(failing) or 'F1'})"}
        if "edits" in outs:  # HERO-O rule edits
            cites = re.findall(r"\bF\d+\b", req.inputs.get("revise", "")) or ["F1"]
            k = int(re.sub(r"\D", "", req.inputs.get("num_edits", "1")) or 1)
            present = req.inputs.get("current_rules", "") + req.inputs.get("task_instructions", "")
            rules = []
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


def simulated_lms(examples: Sequence[dspy.Example], **kw: Any) -> tuple[dspy.LM, dspy.LM, SimulatedWorld]:
    """(task LM, reflection LM, world) for a simulated comparison over these SQL examples."""
    world = SimulatedWorld.from_examples(examples, **kw)
    return scripted_lm(world.task_script, name="sim-task"), scripted_lm(world.reflection_script, name="sim-reflection"), world
