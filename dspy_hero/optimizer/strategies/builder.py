"""The candidate builder: proposals -> distinct, guarded candidate prompts (at most K per round)."""

from __future__ import annotations

import re
from typing import Any

from dspy_hero.optimizer.instructions import PromptState, apply_edit
from dspy_hero.optimizer.reflection import Proposal, not_a_rule
from dspy_hero.optimizer.result import CandidateRecord, CandidateStatus
from dspy_hero.optimizer.strategies.protocols import Candidate

_QUOTES, _BREAKS = re.compile(r"[`'\"]"), re.compile(r"[\s,;:.!?()]+")


def same_words(text: str) -> str:
    """A prompt as its words: case, quotes, backticks and punctuation dropped. Why: on Spider split
    seed 3 the 1.5B reflector re-proposed a rejected rule with one comma more ("`directed_by`,
    `tv_channel`, or `cartoon`"), and re-testing it spent 32 pairs to repeat the 2:2 decision."""
    return _BREAKS.sub(" ", _QUOTES.sub("", text.lower())).strip()


class GuardedBuilder:
    """Applies each edit to the current rules and drops, with the reason on record: unusable edits
    (uncited, not a rule, over the limits), duplicates of the current prompt or of a candidate already
    queued this round, edits already rejected against this same prompt (re-testing them would spend
    budget to repeat a decision; compared by `same_words`), and edits the memorization guard blocks;
    queues at most `limit`."""

    def __init__(self, guard: Any, *, max_rules: int, max_rule_chars: int, limit: int):
        self.guard, self.max_rules, self.max_rule_chars, self.limit = guard, max_rules, max_rule_chars, limit
        self._ids: dict[int, int] = {}

    def build(self, round_no: int, state: PromptState, proposal: Proposal, cases: list[Any],
              rejected: dict[str, str | None], taken: set[str]) -> tuple[list[CandidateRecord], list[Candidate]]:
        records: list[CandidateRecord] = []
        queued: list[Candidate] = []
        options: list[tuple[str, Any]] = [("edit", e) for e in proposal.edits] + [("text", t) for t in proposal.texts]
        refused = {same_words(text) for text in rejected}
        current, queued_words = same_words(state.render()), {same_words(t) for t in taken}
        for kind, item in options:
            n = self._ids[round_no] = self._ids.get(round_no, 0) + 1
            cid = f"r{round_no}{'c' if kind == 'edit' else 't'}{n}"
            if kind == "edit":
                rec = CandidateRecord(cid, kind, item.to_edit().describe(), "", list(item.cites))
                problem = item.problem or (not_a_rule(item.rule, cases) if item.op != "delete" else None)
                rules = apply_edit(state.rules, item.to_edit(), self.max_rules, self.max_rule_chars) if not problem else problem
                records.append(rec)
                if isinstance(rules, str):
                    rec.mark(CandidateStatus.DROPPED, rules)
                    continue
                new_state, added = PromptState(state.seed, rules), item.rule
            else:
                rec = CandidateRecord(cid, kind, "full text", "", [])
                records.append(rec)
                new_state, added = PromptState(state.seed, state.rules, override=item), item.replace(state.seed, " ")
            rec.instructions = new_state.render()
            words = same_words(rec.instructions)
            if words == current or words in queued_words:
                rec.mark(CandidateStatus.DUPLICATE, "same prompt as the current one or a queued one")
                continue
            if words in refused:
                rec.mark(CandidateStatus.DUPLICATE, "already rejected against the current prompt")
                continue
            verdict = self.guard.check(added, state.seed, cases)
            rec.guard_allowed, rec.guard_reason = verdict.allowed, verdict.reason
            if not verdict.allowed:
                rec.mark(CandidateStatus.BLOCKED, verdict.reason)
                continue
            if len(taken) >= self.limit:
                rec.mark(CandidateStatus.SKIPPED, f"beyond num_candidates={self.limit}")
                continue
            taken.add(rec.instructions)
            queued_words.add(words)
            rec.mark(CandidateStatus.QUEUED)
            queued.append(Candidate(rec, new_state))
        return records, queued
