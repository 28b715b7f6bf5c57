"""The evidence builder: diagnosed rollouts -> cases -> rendered evidence (plus per-category slices).

It wraps `build_cases` and any renderer with the `DefaultEvidenceRenderer.render(cases)` signature,
so an improved renderer drops in unchanged. The slices (failing cases of one failure category,
with the passing cases) give the later proposal calls of a round different evidence to reflect on.
"""

from __future__ import annotations

import re
from typing import Any

from dspy_hero.optimizer.evidence import build_cases
from dspy_hero.optimizer.strategies.protocols import Evidence

_VOLATILE = re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`|\d+")


def failure_kind(case: Any) -> str:
    """A label-free category of a failing case: the primary category of its programmatic diagnosis
    when it has one (the pattern the evidence header counts), else the error type when the rollout
    failed, else the first clause of the execution feedback with literals and numbers blanked."""
    diagnosis = getattr(case, "diagnosis", None)
    primary = diagnosis.label_free_only().primary if diagnosis is not None else None
    if primary is not None:
        return primary.describe()
    if case.error:
        return case.error.split(":", 1)[0].strip() or "error"
    text = _VOLATILE.sub("_", str(case.feedback or "").strip().splitlines()[0] if case.feedback else "")
    return " ".join(re.split(r"[.;:(]", text, maxsplit=1)[0].split()[:8]).lower() or "wrong result"


class CaseEvidence:
    def __init__(self, renderer: Any, examples: dict[str, Any], *, pass_threshold: float, num_failing: int,
                 num_passing: int, failure_only: bool, diagnoser: Any = True, training_references: bool = False):
        self.renderer, self.examples = renderer, examples
        self.diagnoser, self.training_references = diagnoser, training_references
        self.pass_threshold, self.num_failing, self.num_passing = pass_threshold, num_failing, num_passing
        self.failure_only = failure_only

    def render(self, results: list[Any], predictor: str) -> Evidence:
        cases = build_cases(results, self.examples, predictor, pass_threshold=self.pass_threshold,
                            num_failing=self.num_failing, num_passing=self.num_passing, failure_only=self.failure_only,
                            diagnose=self.diagnoser, training_references=self.training_references)
        if self.failure_only:
            cases = [c for c in cases if not c.passed]  # the ablation: the reflector never sees a passing case
        if not cases:
            return Evidence(cases, "", [])
        text, shown = self.renderer.render(cases)
        evidence = Evidence(cases, text, list(shown))
        failing = [c for c in cases if not c.passed]
        passing = [c for c in cases if c.passed]
        kinds: dict[str, list[Any]] = {}
        for c in failing:
            kinds.setdefault(failure_kind(c), []).append(c)
        # Most common category first; a slice of unshown failures last so a later call sees new cases.
        for kind, group in sorted(kinds.items(), key=lambda kv: -len(kv[1])):
            s_text, s_shown = self.renderer.render(group + passing)
            evidence.slices.append((kind, s_text, list(s_shown)))
        unshown = [c for c in failing if c.case_id not in set(shown)]
        if unshown:
            s_text, s_shown = self.renderer.render(unshown + passing)
            evidence.slices.append(("cases not shown first", s_text, list(s_shown)))
        return evidence
