"""Typed records of one refinement episode, and the LM/environment accounting behind them.

The trace is the refiner's memory within one episode (its evidence is rendered from it) and the
report a user or benchmark reads afterwards: which actions were taken, what each one showed, every
proposed revision with the gate's verdict, and how many LM calls and environment actions it cost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from dspy.utils.callback import BaseCallback

# Action names the refiner may choose; "execute" is the initial run, "invalid"/"error" record
# malformed refiner output and LM failures.
DIAGNOSE, PROBE, RETRIEVE, REVISE, STOP = "diagnose", "probe", "retrieve", "revise", "stop"
EXECUTE, INVALID, ERROR = "execute", "invalid", "error"


@dataclass(frozen=True)
class GateVerdict:
    """Why a proposed revision was accepted or rejected.

    `stage` is the first stage that decided: "checks" (programmatic) or "judge"; `judge_called`
    makes it visible that the LLM judge was skipped when a programmatic check failed.
    """

    accepted: bool
    stage: str
    reason: str
    judge_called: bool = False
    execution: str = ""  # what running the proposal showed (empty when it was never run)


@dataclass
class Step:
    """One action of the episode and what it produced."""

    index: int
    action: str
    argument: str = ""
    evidence: str = ""
    proposal: str | None = None
    claimed_reason: str = ""
    verdict: GateVerdict | None = None
    lm_calls: int = 0
    env_actions: int = 0
    program_before: str | None = None  # revise steps: the program the proposal would replace
    reasked: bool = False  # revise steps: the first answer was no revision, so the reviser was asked again
    repaired: bool = False  # revise steps: the proposal is the repairer's, not the reviser's (no LM call)

    def render(self) -> str:
        """The step as the refiner, reviser and judge read it."""
        head = f"[{self.index}] {self.action}" + (f" {self.argument}" if self.argument and self.action != DIAGNOSE else "")
        lines = [head]
        if self.evidence:
            lines.append(self.evidence)
        if self.proposal is not None and self.verdict is not None:
            state = "ACCEPTED" if self.verdict.accepted else "REJECTED"
            lines.append(f"proposed revision {state} ({self.verdict.stage}): {self.verdict.reason}")
        return "\n".join(lines)


@dataclass
class RefinementTrace:
    """The full record of one `HeroRefine` call."""

    language: str
    budget: int
    initial_program: str
    final_program: str = ""
    steps: list[Step] = field(default_factory=list)
    actions_used: int = 0
    lm_calls: int = 0
    env_actions: int = 0
    lm_calls_by_role: dict[str, int] = field(default_factory=dict)
    stop_reason: str = ""
    demos_shown: list[str] = field(default_factory=list)
    diagnoses: int = 0  # programs assessed (environment check + diagnosis; Python re-runs its examples)
    initial_suspicions: list[str] = field(default_factory=list)  # why the initial program was suspect

    @property
    def changed(self) -> bool:
        return self.final_program.strip() != self.initial_program.strip()

    @property
    def proposals(self) -> list[Step]:
        return [s for s in self.steps if s.proposal is not None]

    @property
    def accepted(self) -> list[Step]:
        return [s for s in self.proposals if s.verdict is not None and s.verdict.accepted]

    @property
    def reasks(self) -> int:
        return sum(1 for s in self.steps if s.reasked)

    @property
    def repairs(self) -> list[Step]:
        return [s for s in self.proposals if s.repaired]

    @property
    def repairs_accepted(self) -> int:
        return sum(1 for s in self.repairs if s.verdict is not None and s.verdict.accepted)

    def add(self, action: str, **fields: Any) -> Step:
        step = Step(index=len(self.steps), action=action, **fields)
        self.steps.append(step)
        return step

    def evidence_text(self, max_chars: int = 8000) -> str:
        """All evidence so far, newest last; oldest steps are elided first when it is too long.

        The initial execution (step 0) is always kept: it is the anchor every later step refers to.
        """
        parts = [s.render() for s in self.steps]
        if not parts:
            return "(no evidence yet)"
        head, rest = parts[0], parts[1:]
        kept: list[str] = []
        size = len(head)
        for part in reversed(rest):
            if size + len(part) + 2 > max_chars:
                kept.append(f"... ({len(rest) - len(kept)} earlier step(s) omitted)")
                break
            kept.append(part)
            size += len(part) + 2
        return "\n\n".join([head, *reversed(kept)])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["changed"] = self.changed
        return data

    def summary(self, max_chars: int = 160) -> dict[str, Any]:
        """A compact record for benchmark results: each action with its gate verdict, and why it stopped."""

        def cut(text: str) -> str:
            text = " ".join(str(text).split())
            return text if len(text) <= max_chars else text[: max_chars - 3] + "..."

        steps = []
        for s in self.steps:
            row: dict[str, Any] = {"action": s.action, "argument": cut(s.argument)}
            if s.verdict is not None:
                v = s.verdict
                row["verdict"] = {"accepted": v.accepted, "stage": v.stage, "reason": cut(v.reason)}
            if s.reasked:
                row["reasked"] = True
            if s.repaired:
                row["repaired"] = True
            steps.append(row)
        # every accepted revision with the program it replaced, so a results file can show before/after
        revisions = [{"step": s.index, "before": s.program_before or "", "after": s.proposal or "",
                      "stage": s.verdict.stage, "after_ran": cut(s.verdict.execution)}
                     for s in self.accepted if s.verdict is not None]
        return {"budget": self.budget, "initial_program": self.initial_program,
                "steps": steps, "stop_reason": self.stop_reason, "changed": self.changed, "lm_calls": self.lm_calls,
                "actions_used": self.actions_used, "env_actions": self.env_actions,
                "lm_calls_by_role": dict(self.lm_calls_by_role), "proposals": len(self.proposals),
                "accepted": len(self.accepted), "reasks": self.reasks, "diagnoses": self.diagnoses,
                "repairs": len(self.repairs), "repairs_accepted": self.repairs_accepted,
                "initial_suspicions": [cut(x) for x in self.initial_suspicions],
                "accepted_revisions": revisions}


class CallCounter(BaseCallback):
    """Counts LM calls made inside one `HeroRefine` call, and their wall seconds, by role
    (generator/refiner/reviser/...); a call's time goes to the role that started it.

    Attribution, not metering: it says which HERO-T step made each call (the trace's
    ``lm_calls_by_role``); calls and tokens in total are `dspy_hero.lm.usage`'s job.

    Installed through `dspy.context(callbacks=...)`, which is thread-local, so concurrent calls of
    the same module count separately. Adapter retries (ChatAdapter falling back to JSON) count as
    the extra LM calls they are.
    """

    def __init__(self) -> None:
        self.role = "other"
        self.by_role: dict[str, int] = {}
        self.seconds_by_role: dict[str, float] = {}  # wall time from each call's start to its end
        self._started: dict[str, tuple[str, float]] = {}

    def on_lm_start(self, call_id: str, instance: Any, inputs: dict[str, Any]) -> None:
        self.by_role[self.role] = self.by_role.get(self.role, 0) + 1
        self._started[call_id] = (self.role, time.perf_counter())

    def on_lm_end(self, call_id: str, outputs: dict[str, Any] | None, exception: BaseException | None = None) -> None:
        role, start = self._started.pop(call_id, ("other", time.perf_counter()))
        self.seconds_by_role[role] = self.seconds_by_role.get(role, 0.0) + time.perf_counter() - start

    @property
    def total(self) -> int:
        return sum(self.by_role.values())


class RefinementTotals:
    """Thread-safe running totals of refinement traces over many calls, for "actions per query" and
    "LM calls per query". Not an LM usage meter: it sums what each trace recorded (tokens are counted
    by `dspy_hero.lm.usage`, the one usage meter).

    A copy (e.g. `module.deepcopy()` inside an optimizer) starts from zero with its own lock.
    """

    _FIELDS = ("queries", "lm_calls", "env_actions", "actions", "proposals", "accepted", "changed", "reasks",
               "diagnoses", "suspect_initial", "repairs", "repairs_accepted")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals = dict.fromkeys(self._FIELDS, 0)
        self._calls_by_role: dict[str, int] = {}
        self._seconds_by_role: dict[str, float] = {}

    def record(self, trace: RefinementTrace, seconds_by_role: dict[str, float] | None = None) -> None:
        """Add one episode; `seconds_by_role` is its LM wall time by role (kept out of the trace, which
        stays the same when the episode is repeated)."""
        with self._lock:
            for role, n in trace.lm_calls_by_role.items():
                self._calls_by_role[role] = self._calls_by_role.get(role, 0) + n
            for role, sec in (seconds_by_role or {}).items():
                self._seconds_by_role[role] = self._seconds_by_role.get(role, 0.0) + sec
            t = self._totals
            t["queries"] += 1
            t["lm_calls"] += trace.lm_calls
            t["env_actions"] += trace.env_actions
            t["actions"] += trace.actions_used
            t["proposals"] += len(trace.proposals)
            t["accepted"] += len(trace.accepted)
            t["changed"] += int(trace.changed)
            t["reasks"] += trace.reasks
            t["diagnoses"] += trace.diagnoses
            t["suspect_initial"] += int(bool(trace.initial_suspicions))
            t["repairs"] += len(trace.repairs)
            t["repairs_accepted"] += trace.repairs_accepted

    def snapshot(self) -> dict[str, Any]:
        """Totals plus per-query means (0 when no query ran yet), and LM calls and wall seconds by role
        (where refinement time goes: the refiner's, the reviser's or the judge's calls)."""
        with self._lock:
            t: dict[str, Any] = dict(self._totals)
            t["lm_calls_by_role"] = dict(self._calls_by_role)
            t["lm_seconds_by_role"] = {role: round(sec, 2) for role, sec in self._seconds_by_role.items()}
        n = t["queries"]
        for name in ("lm_calls", "env_actions", "actions", "proposals", "accepted"):
            t[f"{name}_per_query"] = t[name] / n if n else 0.0
        return t

    @classmethod
    def of(cls, traces: Iterable[RefinementTrace]) -> dict[str, float]:
        """The same summary for traces gathered elsewhere (e.g. from saved predictions)."""
        totals = cls()
        for trace in traces:
            totals.record(trace)
        return totals.snapshot()

    def reset(self) -> None:
        with self._lock:
            self._totals = dict.fromkeys(self._FIELDS, 0)
            self._calls_by_role, self._seconds_by_role = {}, {}

    def __deepcopy__(self, memo: dict) -> RefinementTotals:
        return RefinementTotals()

    def __getstate__(self) -> dict:
        with self._lock:
            return {"_totals": dict(self._totals), "_calls_by_role": dict(self._calls_by_role),
                    "_seconds_by_role": dict(self._seconds_by_role)}

    def __setstate__(self, state: dict) -> None:
        self._lock = threading.Lock()
        self._totals = {**dict.fromkeys(self._FIELDS, 0), **state.get("_totals", {})}
        self._calls_by_role = dict(state.get("_calls_by_role", {}))
        self._seconds_by_role = dict(state.get("_seconds_by_role", {}))
