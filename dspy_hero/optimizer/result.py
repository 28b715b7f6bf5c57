"""HeroResult: everything a HERO-O run decided and spent, attached as `.detailed_results`.

Fix-to-break ratios (paper §6.1), both cumulative over the run:
- `adopted_fix_break_ratio` = sum of fixes / sum of breaks over the acceptance decisions of the
  candidates that were adopted (the changes that actually shaped the prompt);
- `overall_fix_break_ratio` = the same over every acceptance decision made, adopted or not.
A ratio is None when there were no breaks (JSON has no infinity); the counts are always given.
Token figures: `tokens_per_optimization_call` = reflection-LM tokens (input + output) per
reflection-LM call, the paper's "tokens per optimization call"; `final_prompt_tokens` is the
approximate token length (4 characters per token) of the final instructions, summed over predictors.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from dspy_hero.files import write_json_atomic
from dspy_hero.optimizer.acceptance import Decision
from dspy_hero.optimizer.archive import ArchiveEntry


@dataclass
class CandidateRecord:
    candidate_id: str
    kind: str  # "edit" or "text"
    edit: str
    instructions: str
    cites: list[str] = field(default_factory=list)
    guard_allowed: bool | None = None
    guard_reason: str = ""
    status: str = ""  # dropped / blocked / duplicate / tested / skipped
    decision: Decision | None = None


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


@dataclass
class LMUsage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


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
    task_lm: LMUsage = field(default_factory=LMUsage)
    reflection_lm: LMUsage = field(default_factory=LMUsage)
    tokens_per_optimization_call: float | None = None
    final_prompt_tokens: int = 0
    replayed_metric_calls: int = 0
    rollout_errors: dict[str, int] = field(default_factory=dict)  # failed rollouts by error type
    warnings: list[str] = field(default_factory=list)
    seed: int | None = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

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
            cands = []
            for c in r.get("candidates", []):
                c = dict(c)
                if c.get("decision") is not None:
                    c["decision"] = Decision(**c["decision"])
                cands.append(CandidateRecord(**c))
            r["candidates"] = cands
            rounds.append(RoundRecord(**r))
        data["rounds"] = rounds
        data["archive"] = [ArchiveEntry(**a) for a in data.get("archive", [])]
        data["task_lm"] = LMUsage(**data.get("task_lm", {}))
        data["reflection_lm"] = LMUsage(**data.get("reflection_lm", {}))
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def summary(self) -> str:
        adopted = sum(r.adopted_candidate_id is not None for r in self.rounds)
        return (
            f"HERO-O: {len(self.rounds)} rounds, {adopted} adopted, final={self.final_entry_id}, "
            f"{self.total_metric_calls}/{self.budget} metric calls, fix/break adopted "
            f"{self.adopted_fixes}/{self.adopted_breaks}"
        )
