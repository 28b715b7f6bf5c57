"""HeroResult: everything a HERO-O run decided and spent, attached as `.detailed_results`.

Fix-to-break ratios (paper §6.1), both cumulative over the run:
- `adopted_fix_break_ratio` = sum of fixes / sum of breaks over the acceptance decisions of the
  candidates that were adopted (the changes that actually shaped the prompt);
- `overall_fix_break_ratio` = the same over every acceptance decision made, adopted or not.
A ratio is None when there were no breaks (JSON has no infinity); the counts are always given.
Both are IN-SAMPLE: counted on the pairs that made the decisions, so they are biased upward (a
noise rule that passed its test looks good there by selection). The out-of-sample figures are in
`lineage`: each adopted update re-scored against the prompt it replaced, and the chain up to that
update against the seed, on the selection pool (`held_out_pool` says which pool), which decided
none of them; `held_out_fixes`/`held_out_breaks` are the final prompt's against the seed.
Token figures: `tokens_per_optimization_call` = reflection-LM tokens (input + output) per
reflection-LM call, the paper's "tokens per optimization call"; `final_prompt_tokens` is the
approximate token length (4 characters per token) of the final instructions, summed over predictors.

Metric calls: `total_metric_calls` is every call the metric saw in the run, i.e. the rollouts, the
extra per-predictor feedback calls (`feedback_metric_calls`) and the pre-flight calls
(`preflight_metric_calls`, on empty predictions); on a resumed run, `replayed_metric_calls` of them were
read back from the journal instead of re-run. It never exceeds `budget`.

dspy.GEPA's result fields, with HERO's meaning (a HERO-O archive is a chain: each adopted prompt
replaced the one before it):
- `candidates`: the archive, as instructions per predictor (index 0 is the seed, then each adopted
  prompt in order); JSON-ready, like GEPA's ``to_dict()["candidates"]``.
- `parents`: ``parents[i] == [i - 1]`` (``[None]`` for the seed).
- `val_subscores`: per candidate, its score on each selection-pool example it was run on (keyed by
  example id, ``v<i>`` for valset examples, ``t<i>`` for trainset ones); `val_aggregate_scores` their
  means (None when a candidate was never scored there: the racing selector drops clear losers early,
  and budget may run out). `per_val_instance_best_candidates`: per example, the candidates with its
  top score. `num_full_val_evals`: candidates scored on the whole selection pool.
- `discovery_eval_counts`: metric calls spent when each candidate was adopted.
- `best_idx` / `best_candidate`: the candidate the selector chose (not always the highest mean: ties
  and small differences go to the later adoption, see archive.py); equals `final_instructions`.
- `log_dir`, `seed`, `total_metric_calls`: as GEPA's. `best_outputs_valset` is always None
  (``track_best_outputs`` has no HERO-O meaning).
`settings` holds the run's resolved HeroSettings. `to_dict()` is plain JSON (``json.dumps(r.to_dict())``),
and ``json.dumps(r, default=json_default)`` works on the object itself.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from dspy_hero.files import write_json_atomic
from dspy_hero.lm.usage import Usage
from dspy_hero.optimizer.acceptance import Decision
from dspy_hero.optimizer.archive import ArchiveEntry


class CandidateStatus(StrEnum):
    """Where a candidate's life ended (or stands). The why is `CandidateRecord.reason`, never the status.

    A StrEnum, so result JSON keeps the plain words ("adopted", ...) it always had."""

    PROPOSED = "proposed"  # built, not yet judged by the builder
    DROPPED = "dropped"  # unusable edit (uncited, not a rule, over the limits)
    DUPLICATE = "duplicate"  # same prompt as the current one, a queued one, or one already rejected
    BLOCKED = "blocked"  # the memorization guard refused it
    SKIPPED = "skipped"  # beyond num_candidates, or the round's budget cannot test it well
    QUEUED = "queued"  # waiting for the acceptance test
    ACCEPTED = "accepted"  # passed the acceptance test
    REJECTED = "rejected"  # failed the acceptance test
    ADOPTED = "adopted"  # became the current prompt


@dataclass
class CandidateRecord:
    candidate_id: str
    kind: str  # "edit" or "text"
    edit: str
    instructions: str
    cites: list[str] = field(default_factory=list)
    guard_allowed: bool | None = None
    guard_reason: str = ""
    status: CandidateStatus = CandidateStatus.PROPOSED
    decision: Decision | None = None
    focus: str = ""  # the failure category of the evidence slice it was proposed from ("" = all evidence)
    reason: str = ""  # why it was dropped, skipped or marked a duplicate ("" when the status says all)

    def mark(self, status: CandidateStatus, reason: str = "") -> None:
        self.status, self.reason = status, reason

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CandidateRecord:
        """A record from result JSON, including files written before statuses were typed, whose
        status held the reason after a colon ("dropped: <why>")."""
        data = dict(data)
        if data.get("decision") is not None:
            data["decision"] = Decision(**data["decision"])
        status, _, why = str(data.get("status") or CandidateStatus.PROPOSED.value).partition(":")
        data["status"] = CandidateStatus(status.strip())
        data["reason"] = data.get("reason") or why.strip()
        return cls(**data)


@dataclass
class RoundRecord:
    round: int
    predictor: str
    diagnosis_cases: list[dict[str, Any]] = field(default_factory=list)  # case_id, example_id, passed, score, error
    shown_case_ids: list[str] = field(default_factory=list)
    gradient: str = ""
    reflection_error: str | None = None
    candidates: list[CandidateRecord] = field(default_factory=list)
    adopted_candidate_id: str | None = None
    adopted_instructions: str | None = None
    metric_calls: int = 0
    notes: list[str] = field(default_factory=list)


def _fix_break(before: dict[str, float], after: dict[str, float]) -> tuple[int, int, int]:
    common = [k for k in before if k in after]
    return (sum(after[k] > before[k] for k in common), sum(after[k] < before[k] for k in common), len(common))


def lineage_row(entry_id: str, round_no: int, decision: Decision, parent: dict[str, float], child: dict[str, float],
                seed: dict[str, float], final: bool = False) -> dict[str, Any]:
    """One adopted update: its in-sample counts (the acceptance decision) next to its held-out counts
    (vs. the prompt it replaced) and the cumulative held-out counts (vs. the seed)."""
    f, b, n = _fix_break(parent, child)
    cf, cb, cn = _fix_break(seed, child)
    return {"entry_id": entry_id, "round": round_no, "final": final,
            "in_sample": {"fixes": decision.fixes, "breaks": decision.breaks, "n": decision.n},
            "held_out": {"fixes": f, "breaks": b, "n": n, "ratio": f / b if b else None},
            "cumulative_held_out": {"fixes": cf, "breaks": cb, "n": cn, "ratio": cf / cb if cb else None}}


@dataclass
class HeroResult:
    budget: int = 0
    total_metric_calls: int = 0  # program rollouts, each with one metric evaluation
    preflight_metric_calls: int = 0  # metric calls on empty predictions before the run (paid from `budget`)
    seed_instructions: dict[str, str] = field(default_factory=dict)
    final_instructions: dict[str, str] = field(default_factory=dict)
    final_entry_id: str = "seed"
    rounds: list[RoundRecord] = field(default_factory=list)
    archive: list[ArchiveEntry] = field(default_factory=list)
    pools: dict[str, Any] = field(default_factory=dict)
    adopted_fixes: int = 0
    adopted_breaks: int = 0
    adopted_fix_break_ratio: float | None = None
    overall_fixes: int = 0
    overall_breaks: int = 0
    overall_fix_break_ratio: float | None = None
    cumulative_fix_break: list[dict[str, Any]] = field(default_factory=list)  # per round, adopted sums
    lineage: list[dict[str, Any]] = field(default_factory=list)  # per adopted update, see lineage_row
    held_out_pool: str = ""
    held_out_fixes: int = 0  # final vs. seed on the held-out pool
    held_out_breaks: int = 0
    held_out_n: int = 0
    feedback_metric_calls: int = 0  # extra per-predictor metric executions (5-argument metrics), in the budget
    task_lm: Usage = field(default_factory=Usage)
    reflection_lm: Usage = field(default_factory=Usage)
    tokens_per_optimization_call: float | None = None
    final_prompt_tokens: int = 0
    replayed_metric_calls: int = 0
    rollout_errors: dict[str, int] = field(default_factory=dict)  # failed rollouts by error type
    warnings: list[str] = field(default_factory=list)
    seed: int | None = 0
    # dspy.GEPA's result fields (module docstring)
    candidates: list[dict[str, str]] = field(default_factory=list)
    parents: list[list[int | None]] = field(default_factory=list)
    val_aggregate_scores: list[float | None] = field(default_factory=list)
    val_subscores: list[dict[str, float]] = field(default_factory=list)
    per_val_instance_best_candidates: dict[str, list[int]] = field(default_factory=dict)
    discovery_eval_counts: list[int] = field(default_factory=list)
    num_full_val_evals: int = 0
    best_idx: int = 0
    log_dir: str | None = None
    best_outputs_valset: None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def best_candidate(self) -> dict[str, str]:
        return self.candidates[self.best_idx] if self.candidates else dict(self.final_instructions)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["best_candidate"] = self.best_candidate
        return data

    def save_json(self, path: str | os.PathLike) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load_json(cls, path: str | os.PathLike) -> HeroResult:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeroResult:
        data = dict(data)
        rounds = []
        for r in data.get("rounds", []):
            r = dict(r)
            r["candidates"] = [CandidateRecord.from_dict(c) for c in r.get("candidates", [])]
            rounds.append(RoundRecord(**r))
        data["rounds"] = rounds
        data["archive"] = [ArchiveEntry(**a) for a in data.get("archive", [])]
        data["task_lm"] = Usage.from_dict(data.get("task_lm"))
        data["reflection_lm"] = Usage.from_dict(data.get("reflection_lm"))
        data.pop("best_candidate", None)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def held_out_fix_break_ratio(self) -> float | None:
        return self.held_out_fixes / self.held_out_breaks if self.held_out_breaks else None

    def summary(self) -> str:
        """Rounds, decisions, fixes/breaks and tokens, as the README promises, on four short lines."""
        cands = [c for r in self.rounds for c in r.candidates]
        tested = [c for c in cands if c.decision is not None]
        accepted = sum(c.decision.accepted for c in tested)
        adopted = sum(r.adopted_candidate_id is not None for r in self.rounds)
        t, r = self.task_lm, self.reflection_lm
        per_call = f", {self.tokens_per_optimization_call:.0f} per reflection call" if self.tokens_per_optimization_call else ""
        return (
            f"HERO-O: {len(self.rounds)} rounds, {len(cands)} candidates proposed, {len(tested)} tested, "
            f"{accepted} accepted, {adopted} adopted; final={self.final_entry_id}; "
            f"{self.total_metric_calls}/{self.budget} metric calls\n"
            f"  fixes/breaks: adopted {self.adopted_fixes}/{self.adopted_breaks} in-sample, all tested "
            f"{self.overall_fixes}/{self.overall_breaks}, final vs seed {self.held_out_fixes}/{self.held_out_breaks} "
            f"held-out on {self.held_out_n} ({self.held_out_pool or 'none'})\n"
            f"  tokens: task LM {t.tokens} in {t.calls} calls, reflection LM {r.tokens} in {r.calls} calls{per_call}; "
            f"final prompt {self.final_prompt_tokens} tokens\n"
            f"  rollout errors: {self.rollout_errors or 'none'}"
        )


def json_default(obj: Any) -> Any:
    """A ``json.dumps(..., default=json_default)`` hook for HeroResult and its records."""
    if hasattr(obj, "to_dict"):
        return obj.to_dict()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")
