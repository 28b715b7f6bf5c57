"""The memorization guard: a candidate may teach general rules, never answers.

It checks only the text a candidate adds to the current instruction (the seed is frozen and earlier
rules already passed), against the diagnosis cases the reflector saw:
- a label value (gold program, expected output) appearing in the new text, whitespace/case-normalized;
- a literal from a label (a quoted string or a number with at least two digits, e.g. ``'Fresno'`` or
  ``1532`` from a gold query) that the seed instruction does not already contain;
- a span of `max_copied_tokens` or more consecutive tokens copied from a case's inputs or generated
  program (a copied question or query is an instance fix, not a rule).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

_TOKEN = re.compile(r"\w+|[^\w\s]")
_LITERAL = re.compile(r"'([^'\n]{2,80})'|\"([^\"\n]{2,80})\"|(?<![\w.])(\d[\d.,]*\d)(?![\w.])")


@dataclass(frozen=True)
class GuardVerdict:
    allowed: bool
    reason: str


class Guard(Protocol):
    def check(self, added_text: str, seed: str, cases: list[Any]) -> GuardVerdict: ...


def _norm(text: str) -> str:
    return " ".join(str(text).lower().split())


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(str(text).lower())


class MemorizationGuard:
    """Blocks candidates that copy labels, label literals or long spans from diagnosis cases.

    `min_label_chars`: shorter label values (e.g. "3", "yes") are too common to match as a whole and
    are only checked as literals. `max_copied_tokens`: the longest allowed run of tokens shared with
    a case's inputs or generated program.
    """

    def __init__(self, max_copied_tokens: int = 8, min_label_chars: int = 12):
        self.max_copied_tokens = int(max_copied_tokens)
        self.min_label_chars = int(min_label_chars)

    def check(self, added_text: str, seed: str, cases: list[Any]) -> GuardVerdict:
        text = _norm(added_text)
        if not text:
            return GuardVerdict(True, "nothing added")
        seed_norm = _norm(seed)
        added_grams = _ngrams(_tokens(added_text), self.max_copied_tokens)
        for case in cases:
            for name, value in getattr(case, "labels", {}).items():
                v = _norm(value)
                if len(v) >= self.min_label_chars and v in text:
                    return GuardVerdict(False, f"contains the label {name!r} of case {case.case_id}")
                for lit in _literals(value):
                    low = lit.lower()
                    if low not in seed_norm and re.search(rf"(?<!\w){re.escape(low)}(?!\w)", text):
                        return GuardVerdict(False, f"contains the literal {lit!r} from the label {name!r} of case {case.case_id}")
            if added_grams:
                sources = {**case.inputs, **case.program, **getattr(case, "predictor_inputs", {})}
                for name, value in sources.items():
                    shared = added_grams & _ngrams(_tokens(value), self.max_copied_tokens)
                    if shared:
                        span = " ".join(min(shared))
                        return GuardVerdict(
                            False, f"copies {self.max_copied_tokens}+ tokens from {name!r} of case {case.case_id}: {span!r}"
                        )
        return GuardVerdict(True, "no label, label literal or long copied span")


def _literals(value: str) -> list[str]:
    out = []
    for quoted1, quoted2, number in _LITERAL.findall(str(value)):
        lit = (quoted1 or quoted2 or number).strip()
        if lit and (number or len(lit) >= 2):
            out.append(lit)
    if not out and 2 <= len(str(value).strip()) < 40 and re.search(r"\d", str(value)):
        out.append(str(value).strip())  # a short expected output such as "1532"
    return out


def _ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)} if n > 0 else set()
