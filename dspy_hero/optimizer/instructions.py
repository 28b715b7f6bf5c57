"""Instructions as a frozen seed plus a list of learned rules.

HERO-O never rewrites the seed instruction: a candidate is the seed, verbatim, followed by a section
of short rules learned from execution evidence. Why: a reflection model (especially a small one)
that rewrites the whole prompt tends to paraphrase it or drift from the task's meaning; editing a
rule list keeps every candidate well-formed, keeps the task definition fixed, and makes each
candidate a small, inspectable diff that the memorization guard can check in isolation.

`build_variant` makes the program a set of instructions describes (one copy per prompt variant).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import dspy

RULES_HEADER = "Rules learned from execution evidence:"


@dataclass(frozen=True)
class PromptState:
    """One predictor's instruction: the frozen seed text and the learned rules (in order)."""

    seed: str
    rules: tuple[str, ...] = ()
    # A full replacement text (from a GEPA-style `instruction_proposer`); when set it wins over seed+rules.
    override: str | None = None

    def render(self) -> str:
        if self.override is not None:
            return self.override
        return render_instructions(self.seed, self.rules)


@dataclass(frozen=True)
class RuleEdit:
    """One proposed change to a rule list.

    op: "add" (append `rule`), "replace" (rule number `index`, 1-based, becomes `rule`) or
    "delete" (drop rule number `index`). `cites` are the evidence case ids (F1, P2, ...) it addresses.
    """

    op: str
    rule: str = ""
    index: int | None = None
    cites: tuple[str, ...] = field(default_factory=tuple)

    def describe(self) -> str:
        if self.op == "add":
            return f"ADD: {self.rule}"
        if self.op == "replace":
            return f"REPLACE {self.index}: {self.rule}"
        return f"DELETE {self.index}"


def render_instructions(seed: str, rules: tuple[str, ...] | list[str]) -> str:
    """The seed, then (when there are rules) the rules section as a bullet list."""
    seed = seed.rstrip()
    if not rules:
        return seed
    bullets = "\n".join(f"- {r}" for r in rules)
    return f"{seed}\n\n{RULES_HEADER}\n{bullets}"


def parse_instructions(text: str) -> PromptState:
    """Split an instruction into seed and rules, so a program HERO-O optimized before keeps its rules
    as rules (and they can be replaced or deleted) instead of becoming part of a frozen seed."""
    marker = f"\n\n{RULES_HEADER}\n"
    if marker not in text:
        return PromptState(seed=text.rstrip())
    seed, block = text.split(marker, 1)
    rules = tuple(line[2:].strip() for line in block.splitlines() if line.startswith("- ") and line[2:].strip())
    return PromptState(seed=seed.rstrip(), rules=rules)


def apply_edit(rules: tuple[str, ...], edit: RuleEdit, max_rules: int, max_rule_chars: int) -> tuple[str, ...] | str:
    """The rule list after `edit`, or a string saying why the edit cannot apply.

    Limits are checked here so an over-long rule or list never becomes a candidate.
    """
    rule = " ".join(edit.rule.split())
    if edit.op in ("add", "replace"):
        if not rule:
            return "empty rule"
        if len(rule) > max_rule_chars:
            return f"rule longer than {max_rule_chars} characters"
        if any(_norm(rule) == _norm(r) for r in rules):
            return "rule already present"
    if edit.op == "add":
        if len(rules) >= max_rules:
            return f"already {max_rules} rules (replace or delete one instead)"
        return (*rules, rule)
    if edit.index is None or not 1 <= edit.index <= len(rules):
        return f"no rule number {edit.index}"
    i = edit.index - 1
    if edit.op == "replace":
        return (*rules[:i], rule, *rules[i + 1 :])
    if edit.op == "delete":
        return (*rules[:i], *rules[i + 1 :])
    return f"unknown edit operation {edit.op!r}"


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def instructions_key(instructions: dict[str, str]) -> str:
    """A stable short hash of a program variant (predictor name -> instruction text): the cache and
    journal key for its rollouts."""
    blob = json.dumps(sorted(instructions.items()), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def build_variant(student: dspy.Module, instructions: dict[str, str]) -> dspy.Module:
    """A deep copy of `student` whose predictors carry `instructions` (the student is untouched).

    LMs set on the student's predictors are shared, not copied: a variant must call the same model
    (and engine) the user configured, and LM objects are not meant to be deep-copied.
    """
    lms = {id(p.lm): p.lm for _, p in student.named_predictors() if p.lm is not None}
    try:
        program = copy.deepcopy(student, dict(lms))
    except Exception:  # modules holding uncopyable state: DSPy's own attribute-wise copy
        program = student.deepcopy()
    for (name, predictor), (_, original) in zip(program.named_predictors(), student.named_predictors()):
        predictor.lm = original.lm
        if name in instructions:
            predictor.signature = predictor.signature.with_instructions(instructions[name])
    return program
