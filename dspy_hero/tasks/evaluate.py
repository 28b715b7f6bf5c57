"""Evaluate a program on a split and keep per-example outcomes.

`dspy.Evaluate` gives an aggregate; comparisons between methods need the paired per-example outcomes
(fixes vs breaks, bootstrap intervals), plus the LM calls and tokens each method spent. This module
returns exactly that, as a typed record.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import dspy

from dspy_hero.fields import get_field
from dspy_hero.lm.usage import Usage, track_usage, usage_of
from dspy_hero.metrics.base import feedback_of, program_input_names, program_inputs, score_of


@dataclass
class ExampleOutcome:
    index: int
    score: float
    feedback: str = ""
    program: str = ""
    error: str | None = None
    refinement: dict[str, Any] | None = None  # HeroRefine's compact trace, when the program refines


@dataclass
class EvalReport:
    """Per-example outcomes of one program on one split."""

    name: str
    outcomes: list[ExampleOutcome]
    wall_s: float
    lm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def pass_at_1(self) -> float:
        return sum(o.score >= 1.0 for o in self.outcomes) / max(1, len(self.outcomes))

    @property
    def mean_score(self) -> float:
        return sum(o.score for o in self.outcomes) / max(1, len(self.outcomes))

    def scores(self) -> list[float]:
        return [o.score for o in self.outcomes]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["pass_at_1"] = self.pass_at_1
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalReport:
        data = dict(data)
        data.pop("pass_at_1", None)
        data["outcomes"] = [ExampleOutcome(**o) for o in data["outcomes"]]
        return cls(**data)


def lm_usage(lm: Any) -> tuple[int, int, int]:
    """(calls, input tokens, output tokens) of `usage_of(track_usage(lm))`, as a tuple.

    Kept only for `dspy_hero.cli.pipeline`, which reads it; new code uses `dspy_hero.lm.usage`
    directly (the one usage meter and record)."""
    u = usage_of(track_usage(lm))
    return u.calls, u.input_tokens, u.output_tokens


class RolloutOrder(Protocol):
    """Decides the order in which an evaluation runs its examples (a permutation of their indices)."""

    def __call__(self, program: dspy.Module, examples: Sequence[dspy.Example]) -> list[int]: ...


def shared_input_field(program: dspy.Module, examples: Sequence[dspy.Example]) -> str | None:
    """The first LM-facing input of the program's first predictor that the examples carry.

    Seed programs put the input shared across examples (db_schema, graph_schema) first, so its value
    is the prompt prefix a local server can reuse from one example to the next."""
    if not examples:
        return None
    carried = set(examples[0].inputs().keys())
    for predictor in program.predictors():
        for name in predictor.signature.input_fields:
            if name in carried:
                return name
    return None


@dataclass(frozen=True)
class SharedPrefixOrder:
    """Run examples grouped by the value of their shared input (e.g. one database's schema), groups in
    order of first appearance and examples in their given order within a group.

    Why: llama.cpp reuses the KV cache of the longest prompt prefix it last computed; interleaved
    databases recompute the long schema for almost every rollout, grouped ones once per database.
    Only the order changes: the same examples run and outcomes come back in the original order.
    """

    def __call__(self, program: dspy.Module, examples: Sequence[dspy.Example]) -> list[int]:
        name = shared_input_field(program, examples)
        if name is None:
            return list(range(len(examples)))
        groups: dict[str, list[int]] = {}
        for i, example in enumerate(examples):
            groups.setdefault(str(get_field(example, name, "")), []).append(i)
        return [i for members in groups.values() for i in members]


def given_order(program: dspy.Module, examples: Sequence[dspy.Example]) -> list[int]:
    """The examples' own order (for measuring what grouping buys, or an order fixed by the caller)."""
    return list(range(len(examples)))


def evaluate_program(
    program: dspy.Module,
    examples: Sequence[dspy.Example],
    metric: Callable[..., Any],
    *,
    name: str = "program",
    lm: Any = None,
    num_threads: int = 1,
    program_field: str | None = None,
    progress: Callable[[int], None] | None = None,
    order: RolloutOrder = SharedPrefixOrder(),
) -> EvalReport:
    """Run `program` on each example (in threads) and judge it with `metric`.

    Examples run in `order` (default: grouped by their shared input, see `SharedPrefixOrder`);
    `outcomes` are always in the examples' original order.

    An exception in the program or LM scores 0 and is recorded, like DSPy's failure_score: one bad
    generation must not stop an evaluation. LM usage is the delta of `lm`'s running totals (exact for
    any length, unlike its capped history).
    """
    before = usage_of(track_usage(lm)) if lm is not None else Usage()
    field_name = program_field or getattr(metric, "prediction_field", None)
    accepted = program_input_names(program)  # the inputs the program takes (environment refs it names)

    def one(index: int) -> ExampleOutcome:
        example = examples[index]
        try:
            with dspy.context(lm=lm) if lm is not None else contextlib.nullcontext():
                pred = program(**program_inputs(program, example, accepted))
            result = metric(example, pred)
            text = str(getattr(pred, field_name, "") or "") if field_name else ""
            trace = getattr(pred, "refinement", None)
            summary = trace.summary() if hasattr(trace, "summary") else None
            return ExampleOutcome(index, score_of(result), feedback_of(result) or "", text, refinement=summary)
        except Exception as exc:  # noqa: BLE001 - recorded, scored as a failure
            return ExampleOutcome(index, 0.0, "", "", f"{type(exc).__name__}: {exc}")
        finally:
            if progress is not None:
                progress(1)

    # Worker threads do not inherit the caller's `dspy.context(...)` (a context variable): each example
    # runs in a copy of the caller's context, so its LM, adapter and callbacks apply there too.
    parent = contextvars.copy_context()
    start = time.perf_counter()
    run_order = order(program, examples)
    if sorted(run_order) != list(range(len(examples))):
        raise ValueError(f"rollout order {type(order).__name__} is not a permutation of the {len(examples)} examples")
    with ThreadPoolExecutor(max_workers=max(1, num_threads)) as pool:
        ran = list(pool.map(lambda i: parent.copy().run(one, i), run_order))
    outcomes = sorted(ran, key=lambda o: o.index)
    wall = time.perf_counter() - start
    used = (usage_of(lm) if lm is not None else Usage()) - before
    return EvalReport(
        name=name,
        outcomes=outcomes,
        wall_s=wall,
        lm_calls=used.calls,
        input_tokens=used.input_tokens,
        output_tokens=used.output_tokens,
    )
