"""Evidence: passing and failing cases of the current program, rendered for the reflection LM.

Why both: failing cases say what to revise, passing cases say what a revision must preserve (the
paper's ablation: passing + failing cases give a higher fix-to-break ratio than failures alone).
Rendering is bounded by an approximate token budget (default sized for small local models) and
balances failing and passing cases by interleaving them; long fields are cut so that one long case
does not crowd out the others, and the cases that still do not fit are left out (the rendered ids
say which were shown).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from dspy_hero.lm.scripted import approx_tokens


@dataclass
class Case:
    """One diagnosed example. `case_id` (F1.., P1..) is how reflection cites it; `labels` (gold
    programs, expected outputs) are kept for the memorization guard and never rendered."""

    case_id: str
    example_id: str
    passed: bool
    score: float
    inputs: dict[str, str]
    program: dict[str, str]
    feedback: str
    predictor_inputs: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    error: str | None = None

    def to_dict(self, with_labels: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_labels:
            data.pop("labels")
        return data


def build_cases(
    results: list[Any],
    examples: dict[str, Any],
    predictor: str,
    *,
    pass_threshold: float,
    num_failing: int,
    num_passing: int,
    failure_only: bool = False,
) -> list[Case]:
    """Cases from rollout results (in the given order): up to `num_failing` failing (score below
    `pass_threshold`) and `num_passing` passing ones (none when `failure_only`)."""
    cases: list[Case] = []
    n_fail = n_pass = 0
    for r in results:
        passed = r.score >= pass_threshold
        if passed and (failure_only or n_pass >= num_passing):
            continue
        if not passed and n_fail >= num_failing:
            continue
        if passed:
            n_pass += 1
            cid = f"P{n_pass}"
        else:
            n_fail += 1
            cid = f"F{n_fail}"
        ex = examples[r.example_id]
        calls = r.traces.get(predictor) or []
        program = dict(calls[-1]["outputs"]) if calls else dict(r.outputs)
        if not calls and "raw_output" in program and len(program) > 1:
            program.pop("raw_output")
        inputs = {k: str(v) for k, v in ex.inputs().items()}
        pred_inputs = dict(calls[-1]["inputs"]) if calls else {}
        if pred_inputs == inputs:
            pred_inputs = {}
        labels = {k: str(v) for k, v in ex.labels().items()}
        feedback = r.predictor_feedback.get(predictor) or r.feedback
        cases.append(Case(cid, r.example_id, passed, r.score, inputs, program, feedback, pred_inputs, labels, r.error))
    return cases


class EvidenceRenderer(Protocol):
    def render(self, cases: list[Case]) -> tuple[str, list[str]]:
        """(text for the reflection LM, ids of the cases the text shows)."""
        ...


class DefaultEvidenceRenderer:
    """Plain-text case blocks, failing and passing interleaved (F1, P1, F2, P2, ...) until
    `token_budget` approximate tokens; every field is cut to `max_field_chars`."""

    def __init__(self, token_budget: int = 3000, max_field_chars: int = 600):
        self.token_budget = int(token_budget)
        self.max_field_chars = int(max_field_chars)

    def render(self, cases: list[Case]) -> tuple[str, list[str]]:
        failing = [c for c in cases if not c.passed]
        passing = [c for c in cases if c.passed]
        order: list[Case] = []
        for i in range(max(len(failing), len(passing))):
            order += failing[i : i + 1] + passing[i : i + 1]
        blocks, shown, used = [], [], 0
        blocked = {True: False, False: False}
        for case in order:
            if blocked[case.passed]:
                continue
            block = self._block(case)
            cost = approx_tokens(block)
            if used + cost > self.token_budget and shown:
                blocked[case.passed] = True
                continue
            if used + cost > self.token_budget:  # always show at least one case
                block = block[: max(200, self.token_budget * 4)]
                cost = approx_tokens(block)
            blocks.append(block)
            shown.append(case.case_id)
            used += cost
        return "\n\n".join(blocks), shown

    def _block(self, case: Case) -> str:
        status = "PASSED" if case.passed else "FAILED"
        lines = [f"### Case {case.case_id} ({status}, score {case.score:.2f})", "Inputs:"]
        lines += [f"  {k}: {self._cut(v)}" for k, v in case.inputs.items()]
        if case.predictor_inputs:
            lines.append("Inputs to this step:")
            lines += [f"  {k}: {self._cut(v)}" for k, v in case.predictor_inputs.items()]
        lines.append("Generated output:")
        lines += [f"  {k}: {self._cut(v)}" for k, v in case.program.items()]
        lines.append(f"Execution feedback: {self._cut(case.feedback)}")
        return "\n".join(lines)

    def _cut(self, text: str) -> str:
        text = " ".join(str(text).split()) if len(str(text)) > self.max_field_chars else str(text)
        return text if len(text) <= self.max_field_chars else text[: self.max_field_chars] + " …"
