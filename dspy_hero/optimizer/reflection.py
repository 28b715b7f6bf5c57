"""Reflection: evidence -> textual gradient -> K rule edits, on the reflection LM.

Designed so a small model still does useful work: instead of asking it to rewrite a whole prompt
(small models mostly paraphrase the seed), it is asked two narrow questions in turn: (1) what do
passing cases do right and failing cases do wrong, citing case ids; (2) which short, general rules
would fix the cited failures, as one edit per line (ADD / REPLACE n / DELETE n). The parser accepts
numbered lists, bullets, bare sentences and JSON, and falls back to the raw completion when DSPy's
adapter cannot parse it. Edits that cite no failing case are dropped: a rule must be grounded in
evidence. Candidates are then assembled by code (seed + rules), so they are always well-formed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import dspy

from dspy_hero.optimizer.instructions import RuleEdit


class DiagnoseEvidence(dspy.Signature):
    """You review execution evidence for a program generator. Each case shows the inputs, the program
    the generator wrote, and what happened when that program was executed. Failing cases have ids F1,
    F2, ...; passing cases have ids P1, P2, ....
    In plain English, say what the generator does wrong in the failing cases and what it does right in
    the passing cases. Describe general behaviour (which construct it misuses, what it forgets), not
    one particular question. End each line with the ids of the cases it is based on."""

    task_instructions: str = dspy.InputField(desc="the fixed task instruction")
    current_rules: str = dspy.InputField(desc="the numbered rules learned so far, or (none)")
    evidence: str = dspy.InputField(desc="cases with inputs, generated program and execution feedback")
    preserve: str = dspy.OutputField(desc="one line per good behaviour seen in passing cases, in plain English, ending with their ids")
    revise: str = dspy.OutputField(desc="one line per mistake seen in failing cases, in plain English, ending with their ids")


class ProposeRuleEdits(dspy.Signature):
    """Write rules to add to the program generator's instructions so that it stops making the mistakes
    in `revise` and keeps the behaviours in `preserve`.
    A rule is one English sentence of the form "When <situation>, <what to do>." It must be general:
    never include a specific question, value or name from a case, and never a whole program.
    Write one edit per line, each ending with the ids of the failing cases it fixes:
    ADD: When <situation>, <what to do>. (F1, F3)
    To change an existing numbered rule: REPLACE <number>: <new rule> (F2)
    To remove an existing numbered rule: DELETE <number> (F4)"""

    task_instructions: str = dspy.InputField(desc="the fixed task instruction")
    current_rules: str = dspy.InputField(desc="the numbered rules learned so far, or (none)")
    preserve: str = dspy.InputField(desc="behaviours to preserve")
    revise: str = dspy.InputField(desc="mistakes to fix")
    num_edits: int = dspy.InputField(desc="how many different edits to propose")
    edits: str = dspy.OutputField(desc="one edit per line (ADD / REPLACE / DELETE), each ending with failing case ids")


@dataclass
class ReflectionContext:
    """What a proposer sees in one round."""

    predictor: str
    seed: str
    rules: tuple[str, ...]
    current_text: str
    evidence: str
    shown_case_ids: list[str]
    num_candidates: int
    cases: list[Any] = field(default_factory=list)
    rejected: tuple[str, ...] = ()  # edits already tested against this prompt and rejected
    proposed: tuple[str, ...] = ()  # edits already proposed in this round (a later call must differ)
    temperature: float = 0.0  # sampling temperature of the reflection calls
    sample: int = 0  # which proposal call of the round (distinct samples at temperature > 0)
    repeat: int = 0  # earlier rounds asked about this same evidence, prompt and rejected rules
    focus: str = ""  # the failure category this call's evidence slice shows, if any

    def rules_and_rejected(self) -> str:
        """The numbered rules, plus the edits already rejected or proposed (so a later call, often
        shown similar evidence, proposes something new instead of repeating them)."""
        text = numbered(self.rules)
        if self.rejected:
            text += ("\n\nAlready tested and rejected (they did not fix more than they broke); "
                     "propose different rules:\n" + "\n".join(f"- {r}" for r in self.rejected))
        if self.proposed:
            text += ("\n\nAlready proposed in this round; propose different rules:\n"
                     + "\n".join(f"- {r}" for r in self.proposed))
        if self.focus:
            text += f"\n\nThe failing cases shown have this in common: {self.focus}"
        return text

    def lm_config(self, attempt: int = 0) -> dict[str, Any]:
        """Per-call LM settings: temperature > 0 samples, and a distinct rollout id per call keeps the
        K calls of a round from being answered from one cache entry. A repeated question (`repeat`)
        also gets its own seed: the rollout id only keys DSPy's cache, and a seeded server (the
        deterministic local one, or an API given a seed) answers an identical prompt identically --
        on Spider split seed 2 four rounds re-asked one round's evidence and got its 28 proposals back."""
        if self.temperature <= 0:
            return {}
        rollout = 1000 * self.repeat + 100 * self.sample + attempt
        return {"temperature": self.temperature, "rollout_id": rollout, **({"seed": rollout} if self.repeat else {})}

    @property
    def failing_ids(self) -> set[str]:
        return {c for c in self.shown_case_ids if c.startswith("F")}


@dataclass
class ProposedEdit:
    """A parsed edit and, when it cannot be used, why (e.g. it cites no failing case)."""

    op: str
    rule: str
    index: int | None
    cites: list[str]
    line: str
    problem: str | None = None

    def to_edit(self) -> RuleEdit:
        return RuleEdit(self.op, self.rule, self.index, tuple(self.cites))


@dataclass
class Proposal:
    """A proposer's output for one round. `texts` are full replacement instructions (from a GEPA-style
    proposer); `error` is set when the reflection LM failed and there are no candidates."""

    gradient: str = ""
    raw: str = ""
    edits: list[ProposedEdit] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    error: str | None = None
    lm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Proposal:
        data = dict(data)
        data["edits"] = [ProposedEdit(**e) for e in data.get("edits", [])]
        return cls(**data)


class Proposer(Protocol):
    def propose(self, ctx: ReflectionContext) -> Proposal: ...


def numbered(rules: tuple[str, ...] | list[str]) -> str:
    return "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1)) or "(none)"


class RuleProposer:
    """The default proposer: `DiagnoseEvidence` then `ProposeRuleEdits` (two reflection-LM calls).

    It runs under whatever LM is current (HeroOptimizer sets the reflection LM with dspy.context).
    """

    def __init__(self) -> None:
        self.diagnose = dspy.Predict(DiagnoseEvidence)
        self.edit = dspy.Predict(ProposeRuleEdits)

    def propose(self, ctx: ReflectionContext) -> Proposal:
        """Diagnose, then ask for edits; when no edit is a usable rule (code, the template, a restated
        error, a copied program), ask once more with the reason, then keep whatever parses."""
        rules, config = numbered(ctx.rules), ctx.lm_config()
        try:
            diag = _call(self.diagnose, ("preserve", "revise"), "revise", config, task_instructions=ctx.seed,
                         current_rules=rules, evidence=ctx.evidence)
            preserve, revise = diag.get("preserve", ""), diag.get("revise", "")
            gradient = f"Preserve:\n{preserve.strip()}\n\nRevise:\n{revise.strip()}"
            asked = dict(task_instructions=ctx.seed, current_rules=ctx.rules_and_rejected(),
                         preserve=preserve or "(none)", revise=revise or "(none)", num_edits=ctx.num_candidates)
            raw = _call(self.edit, ("edits",), "edits", config, **asked).get("edits", "")
            edits = parse_edits(raw, ctx.failing_ids, ctx.cases)
            why = next((e.problem for e in edits if e.problem and e.problem.startswith(NOT_A_RULE)), None)
            if why and not any(e.problem is None for e in edits):
                asked["current_rules"] += (f"\n\nYour previous answer was not usable ({why}). Answer with "
                                           "English rules of the form ADD: When <situation>, <what to do>. (F1)")
                raw2 = _call(self.edit, ("edits",), "edits", config, **asked).get("edits", "")
                raw, edits = f"{raw}\n[re-asked: {why}]\n{raw2}", edits + parse_edits(raw2, ctx.failing_ids, ctx.cases)
        except Exception as exc:  # LM down, timeouts, rate limits: the round records it, nothing is adopted
            return Proposal(error=f"{type(exc).__name__}: {str(exc).strip()[:300]}")
        return Proposal(gradient=gradient, raw=raw, edits=edits)


def _call(predictor: dspy.Predict, fields: tuple[str, ...], fallback: str, config: dict[str, Any] | None = None,
          **inputs) -> dict[str, str]:
    """Run a predictor; if the adapter cannot parse the answer, keep the raw completion as the
    `fallback` field (small models often answer in free text: the failing behaviours, and the edit
    lines, are what matter, and the tolerant parsers below cope with free text)."""
    try:
        pred = predictor(**inputs, config=config) if config else predictor(**inputs)
        return {f: str(getattr(pred, f, "") or "") for f in fields}
    except dspy.utils.exceptions.AdapterParseError as exc:
        return {fallback: str(exc.lm_response or "")}


_BULLET = re.compile(r"^\s*(?:[-*•+]|\d+\s*[.):]|\(\d+\)|#+)\s*")
_ADD = re.compile(r"^(?:add|append|new|insert)(?:\s+(?:a\s+)?rule)?\s*[:\-–]?\s*(.*)$", re.IGNORECASE)
_REPLACE = re.compile(
    r"^(?:replace|modify|update|change|revise|rewrite)(?:\s+rule)?\s*#?\s*(\d+)\s*(?:with|by|to)?\s*[:\-–]?\s*(.*)$", re.IGNORECASE
)
_DELETE = re.compile(r"^(?:delete|remove|drop)(?:\s+rule)?\s*#?\s*(\d+)\b\s*(.*)$", re.IGNORECASE)
_CITE = re.compile(r"\b([FP])(\d{1,3})\b")
_CITE_GROUP = re.compile(r"[\(\[][^\)\]]*\b[FP]\d{1,3}\b[^\)\]]*[\)\]]")
_TRAIL_CITE = re.compile(r"(?:[-–—,;:]\s*)?(?:cases?|cites?|fixes|see|addresses)?\s*:?\s*[FP]\d{1,3}(?:\s*(?:,|and|&|/)\s*[FP]\d{1,3})*\s*\.?\s*$", re.IGNORECASE)


def parse_edits(text: str, failing_ids: set[str], cases: list[Any] | None = None) -> list[ProposedEdit]:
    """Tolerant parse of the edit list; each edit keeps its citations and a `problem` if unusable
    (given the `cases`, a rule that restates one's error or copies one's program is not a rule)."""
    items = _json_items(text)
    lines = items if items is not None else [ln for ln in str(text or "").splitlines()]
    edits: list[ProposedEdit] = []
    for item in lines:
        edit = _json_edit(item) if isinstance(item, dict) else _line_edit(str(item))
        if edit is None:
            continue
        cited_failing = [c for c in edit.cites if c in failing_ids]
        if not cited_failing:
            edit.problem = "cites no failing case shown in the evidence"
        elif edit.op != "delete" and len(edit.rule.split()) < 3:
            edit.problem = "rule too short to be a general instruction"
        elif edit.op != "delete" and (why := not_a_rule(edit.rule, cases or ())):
            edit.problem = why
        edits.append(edit)
    return edits


_CODE = re.compile(  # how programs (not sentences about them) begin
    r"^\s*(?:select\s+(?:\*|distinct\b|[\w.]+\s*(?:\([^)]*\)\s*)?(?:,|\bfrom\b|\bas\b))|with\s+\w+\s+as\s*\(|insert\s+into|update\s+\w+\s+set|"
    r"delete\s+from|create\s+(?:table|index|view)|(?:optional\s+)?match\s*\(|merge\s*\(|def\s+\w+\s*\(|import\s+\w+|"
    r"from\s+[\w.]+\s+import\b|class\s+\w+\s*[:(])",
    re.IGNORECASE,
)


_EMBEDDED = re.compile(  # a whole query inside a sentence ("When ..., SELECT * FROM t WHERE ...")
    r"\bselect\b[^.;]*?\bfrom\s+\w+[^.;]*?\b(?:where|join|group\s+by|order\s+by)\b|\bmatch\s*\(\w*:\w+[^)]*\)\s*-",
    re.IGNORECASE,
)


NOT_A_RULE = "not a rule:"

# The column names of the per-pattern prompt's three examples (reflection_cases.RuleFromFailure): a rule naming
# them when the evidence does not copies an example (the 1.5B model did, and later calls repeated the copy).
# Only names: a rule that borrows an example's wording but names the evidence's own columns ("flags sample
# or demo rows (such as deleted_at or archived_at)", the demo's real proposal) still says what to do there.
EXAMPLE_WORDS = ("is_sample", "demo_row", "temp_f", "high_f", "sales_channel", "promo_tier")


def copies_an_example(rule: str, evidence: str) -> bool:
    low, seen = rule.lower(), evidence.lower()
    return any(w in low and w not in seen for w in EXAMPLE_WORDS)


def not_a_rule(rule: str, cases: Any = ()) -> str | None:
    """Why `rule` is not an instruction: small models often answer with a program, the template, the
    error message they were shown, or the program of a case ("The correct query is SELECT ...")."""
    if "```" in rule or _CODE.match(rule) or _EMBEDDED.search(rule):
        return f"{NOT_A_RULE} a program fragment, not an instruction"
    if re.search(r"<\s*(?:situation|what to do|new rule|rule|number)\s*>", rule, re.IGNORECASE):
        return f"{NOT_A_RULE} it repeats the template placeholder"
    shown = " ".join(str(v) for c in cases for part in (getattr(c, "inputs", {}), getattr(c, "program", {}))
                     for v in part.values())
    if copies_an_example(rule, shown):
        return f"{NOT_A_RULE} it copies the per-pattern prompt's example"
    low = _squash(rule)
    for case in cases:
        for value in list(getattr(case, "program", {}).values()):
            v = _squash(value)
            if len(v) >= 16 and v in low:
                return f"{NOT_A_RULE} it copies the program of case {case.case_id}"
        for text in (getattr(case, "error", None), getattr(case, "feedback", None)):
            t = _squash(text or "")
            if len(t) >= 24 and (t in low or (len(low) >= 24 and low in t)):
                return f"{NOT_A_RULE} it restates the execution feedback of case {case.case_id}"
    return None


def _squash(text: str) -> str:
    return " ".join(str(text).lower().split()).strip(" .")


def _json_items(text: str) -> list[Any] | None:
    s = str(text or "").strip()
    m = re.search(r"(\[.*\]|\{.*\})", s, re.DOTALL)
    if not m:
        return None
    try:
        data = json.loads(m.group(1))
    except ValueError:
        return None
    if isinstance(data, dict):
        data = next((v for v in data.values() if isinstance(v, list)), [data])
    if not isinstance(data, list) or not all(isinstance(x, (dict, str)) for x in data):
        return None
    return data


def _json_edit(item: dict[str, Any]) -> ProposedEdit | None:
    low = {str(k).lower(): v for k, v in item.items()}
    op = str(low.get("op") or low.get("action") or low.get("type") or "add").lower()
    op = "replace" if op.startswith(("rep", "mod", "upd", "cha", "rev")) else "delete" if op.startswith(("del", "rem", "dro")) else "add"
    rule = str(low.get("rule") or low.get("text") or low.get("new_rule") or "")
    idx = low.get("index") or low.get("number") or low.get("rule_number")
    cites_raw = low.get("cases") or low.get("cites") or low.get("case_ids") or []
    cites = _CITE.findall(" ".join(map(str, cites_raw)) if isinstance(cites_raw, list) else str(cites_raw))
    cites = [f"{a}{b}" for a, b in cites] + [f"{a}{b}" for a, b in _CITE.findall(rule)]
    try:
        index = int(idx) if idx is not None else None
    except (TypeError, ValueError):
        index = None
    if op != "delete" and not rule.strip():
        return None
    return ProposedEdit(op, _clean_rule(rule), index, _unique(cites), json.dumps(item, ensure_ascii=False))


def _line_edit(line: str) -> ProposedEdit | None:
    body = _BULLET.sub("", line.strip()).strip().strip("*").strip()
    if not body or (body.endswith(":") and not _CITE.search(body)):
        return None
    cites = _unique(f"{a}{b}" for a, b in _CITE.findall(body))
    if m := _DELETE.match(body):
        return ProposedEdit("delete", "", int(m.group(1)), cites, line)
    if m := _REPLACE.match(body):
        return ProposedEdit("replace", _clean_rule(m.group(2)), int(m.group(1)), cites, line)
    m = _ADD.match(body)
    rule = m.group(1) if m else body
    if not rule.strip():
        return None
    return ProposedEdit("add", _clean_rule(rule), None, cites, line)


def _clean_rule(rule: str) -> str:
    rule = _CITE_GROUP.sub("", rule)
    rule = _TRAIL_CITE.sub("", rule.strip())
    rule = _CITE.sub("", rule)
    rule = re.sub(r"\s+([,.;:])(?=\s|$)", r"\1", " ".join(rule.split()))  # "x ." -> "x." but keep " .get("
    return rule.strip(" -–—:;,\"'`")


def _unique(items) -> list[str]:
    seen: list[str] = []
    for x in items:
        if x not in seen:
            seen.append(x)
    return seen


class GepaProposerAdapter:
    """Wraps a GEPA `instruction_proposer` (``(candidate, reflective_dataset, components_to_update)
    -> dict[name, text]``) as a HERO proposer; its new texts are full-replacement candidates that
    still go through the guard and paired acceptance."""

    def __init__(self, fn: Callable[..., dict[str, str]]):
        self.fn = fn

    def propose(self, ctx: ReflectionContext) -> Proposal:
        dataset = [
            {"Inputs": c.inputs, "Generated Outputs": c.program, "Feedback": c.feedback}
            for c in ctx.cases
            if c.case_id in ctx.shown_case_ids
        ]
        try:
            out = self.fn(
                candidate={ctx.predictor: ctx.current_text},
                reflective_dataset={ctx.predictor: dataset},
                components_to_update=[ctx.predictor],
            )
        except Exception as exc:
            return Proposal(error=f"{type(exc).__name__}: {str(exc)[:300]}")
        text = (out or {}).get(ctx.predictor)
        return Proposal(raw=str(text or ""), texts=[str(text)] if text else [])
