"""HeroSettings: every HERO-O setting of one run, validated once and frozen.

The run and its strategies read settings from this object only (never from the optimizer), so a
strategy cannot depend on another one's knobs by accident and the journal fingerprint is exactly the
set of values that can change a result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

# How much HERO-O searches per `auto` level: (rounds T, candidates K per round, acceptance max pairs).
# Heavier levels also get a larger budget (dspy.GEPA.auto_budget); they spend it on more rounds, more
# candidates and larger acceptance samples, not on re-testing the same ideas.
SEARCH_LEVELS: dict[str, tuple[int, int, int]] = {
    "light": (5, 4, 64),
    "medium": (8, 6, 96),
    "heavy": (12, 8, 128),
}


class ProposalStyle(str, Enum):
    """Which reflection prompt a round asks, and whether the other one is its fallback when the first
    yields no usable rule.

    EVIDENCE_WIDE: the whole evidence, a diagnosis then rule edits (two long calls; strong models),
    per-pattern as the fallback.
    PER_PATTERN: one short call per counted failure pattern, shown its instances (small models: on the
    conventions task the 1.5B model spent 243 s on the evidence-wide calls and returned SQL fragments),
    evidence-wide as the fallback.
    PER_PATTERN_ONLY: per-pattern, no fallback. Why: with the 1.5B reflector the fallback's long calls
    (diagnoses cut at the output cap, SQL in place of rules) made 97 of the 274 reflection calls of
    three runs and wrote 1 of their 20 tested candidates, none adopted; replayed without it, both
    Spider runs make the same decisions with 22 instead of 51 and 47 instead of 75 calls
    (benchmarks/RESULTS.md, session 19). A round whose per-pattern rules are all known then spends
    nothing and the next round asks again.
    AUTO: PER_PATTERN_ONLY when the reflection LM is the embedded local model, else EVIDENCE_WIDE.
    """

    AUTO = "auto"
    EVIDENCE_WIDE = "evidence_wide"
    PER_PATTERN = "per_pattern"
    PER_PATTERN_ONLY = "per_pattern_only"

    def for_reflector(self, local: bool) -> ProposalStyle:
        """The style a run uses: AUTO resolved for a reflection LM that is (or is not) the embedded model."""
        if self is not ProposalStyle.AUTO:
            return self
        return ProposalStyle.PER_PATTERN_ONLY if local else ProposalStyle.EVIDENCE_WIDE


VOLATILE = ("log_dir", "num_threads", "display_progress", "use_mlflow", "max_errors", "verbose")  # never change a decision


@dataclass(frozen=True)
class HeroSettings:
    auto: str | None = None
    max_full_evals: int | None = None
    max_metric_calls: int | None = None
    num_threads: int = 1
    failure_score: float = 0.0
    perfect_score: float = 1.0
    log_dir: str | None = None
    use_mlflow: bool = False
    seed: int | None = 0
    num_rounds: int = 5
    min_calls_per_round: int = 24
    num_candidates: int = 4
    num_failing_cases: int = 32
    num_passing_cases: int = 32
    failure_only: bool = False
    evidence_token_budget: int | None = None  # None: sized from the reflection LM's context window
    training_references: bool = False  # show TRAINING cases' reference programs and their structural diff
    acceptance_margin: float = 0.0
    acceptance_initial: int = 8
    acceptance_max: int = 64
    acceptance_alpha: float = 0.1
    detectable_fix_share: float = 0.25  # a funded test must be able to adopt a rule fixing this share of its pairs
    pool_fractions: tuple[float, float, float] = (0.3, 0.5, 0.2)
    group_key: str | None = None
    selection_budget_fraction: float = 0.2
    max_rules: int = 12
    max_rule_chars: int = 300
    display_progress: bool = True
    reflection_temperature: float = 1.0
    max_proposal_calls: int | None = None  # None: num_candidates
    proposal_style: ProposalStyle = ProposalStyle.AUTO
    max_errors: int = 10  # rollouts that may raise (program or metric) before the run aborts, as dspy.Evaluate
    verbose: bool = False  # round lines and the summary at WARNING (shown by default) instead of INFO

    def __post_init__(self) -> None:
        if not 0.0 <= self.failure_score <= 1.0 or not 0.0 < self.perfect_score <= 1.0:
            raise ValueError("failure_score must be in [0, 1] and perfect_score in (0, 1]: scores are in [0, 1]")
        if self.num_rounds < 0 or self.num_candidates < 1 or self.min_calls_per_round < 0:
            raise ValueError("num_rounds and min_calls_per_round must be >= 0 and num_candidates >= 1")
        if not 0.0 <= self.selection_budget_fraction < 1.0:
            raise ValueError("selection_budget_fraction must be in [0, 1)")
        if not 0.0 < self.acceptance_alpha < 0.5:
            raise ValueError(f"acceptance_alpha must be in (0, 0.5), got {self.acceptance_alpha}: it bounds the "
                             "probability that a run adopts a change that is not better (default 0.1)")
        if self.acceptance_initial < 1 or self.acceptance_max < self.acceptance_initial:
            raise ValueError("need 1 <= acceptance_initial <= acceptance_max")
        if not 0.0 <= self.detectable_fix_share < 1.0:
            raise ValueError(f"detectable_fix_share must be in [0, 1), got {self.detectable_fix_share} "
                             "(0: fund every candidate that gets two first looks)")
        if not 0.0 <= self.acceptance_margin < 1.0:
            raise ValueError("acceptance_margin must be in [0, 1)")
        if not isinstance(self.max_errors, int) or isinstance(self.max_errors, bool) or self.max_errors < 0:
            raise ValueError(f"max_errors must be an int >= 0, got {self.max_errors!r}")
        if self.reflection_temperature < 0:
            raise ValueError("reflection_temperature must be >= 0")
        try:
            object.__setattr__(self, "proposal_style", ProposalStyle(self.proposal_style))
        except ValueError:
            raise ValueError(f"proposal_style must be one of {[s.value for s in ProposalStyle]}, "
                             f"got {self.proposal_style!r}") from None

    @property
    def proposal_calls(self) -> int:
        return self.max_proposal_calls if self.max_proposal_calls is not None else self.num_candidates

    def fingerprint_items(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in VOLATILE}

    @classmethod
    def resolve(cls, **given: Any) -> HeroSettings:
        """Settings from the optimizer's arguments; None for num_rounds / num_candidates /
        acceptance_max means the `auto` level's value (light when no auto is set)."""
        level = SEARCH_LEVELS[given.get("auto") or "light"] if (given.get("auto") or "light") in SEARCH_LEVELS else SEARCH_LEVELS["light"]
        for name, value in zip(("num_rounds", "num_candidates", "acceptance_max"), level):
            if given.get(name) is None:
                given[name] = value
        if given.get("num_threads") is None:
            given["num_threads"] = 1
        if given.get("max_errors") is None:
            given["max_errors"] = 10
        given["pool_fractions"] = tuple(given.get("pool_fractions") or (0.3, 0.5, 0.2))
        return cls(**given)
