"""Rollouts: run a program variant on examples, score each with the metric, cache and journal it.

One rollout = one program run + one metric evaluation on one example = one metric call of budget.
This is our own small thread-pool loop rather than `dspy.Evaluate` because HERO-O needs, per
example, the score, the metric's feedback, the outputs, each predictor's trace, the LM usage and
any exception, and must charge a failed rollout to the budget like any other.

Failure policy (why): an LM that times out, is rate-limited, returns nothing or returns text the
adapter cannot parse has still been paid for, so the rollout counts and scores `failure_score`, and
the error text becomes the case feedback (the reflector can learn from format failures). A metric
that returns a score outside [0, 1] is a bug in the metric, not a property of the program, so it
stops the run with a clear error (completed rollouts are already in the journal).

Fail fast (as `dspy.Evaluate`'s ``max_errors``): a rollout whose program or metric RAISED is an error
(format failures excepted: they are evidence the reflector learns from, and small models make many);
the first one's traceback is logged; more than ``max_errors`` errors abort the run (`RolloutAbort`),
and so do the first ``max_errors`` live rollouts (at least 3) failing all for the same reason: the
same exception type, format failures included, or the same "cannot be scored" verdict (a broken
gold, a missing prediction field). A program or metric that fails on everything then costs a few
rollouts, not the budget. A pass, or a failure of another kind, ends the streak.

Inputs: a program is called with `program_inputs` (its accepted inputs only, see metrics.base), so
environment references need not be marked as inputs and no input reaches a program that does not
declare it; the metric still sees the whole example.

Neighbours: the metric is called through `metrics.base.MetricAdapter` (the calling convention), LM
usage is counted by `lm.usage.UsageMeter`, and a variant's program is `instructions.build_variant`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import dspy

from dspy_hero.fields import GROUP_FIELDS, get_field
from dspy_hero.lm.usage import Usage, UsageMeter
from dspy_hero.metrics.base import MetricAdapter, MetricError, program_input_names, program_inputs, unscorable_reason
from dspy_hero.optimizer.instructions import build_variant

_MAX_FIELD_CHARS = 4000
logger = logging.getLogger("dspy_hero.optimizer")


class RolloutAbort(RuntimeError):
    """The run stopped early because rollouts keep failing (see `FailFast`); the message says why."""


# Exceptions that are format failures: scored failing cases (evidence), not errors for max_errors.
FORMAT_FAILURES = ("AdapterParseError",)


class FailFast:
    """Counts failing rollouts as dspy.Evaluate counts errors, and stops a run that cannot work.

    `observe` raises `RolloutAbort` when more than `max_errors` rollouts raised, or when the first
    `streak` live rollouts all failed for one same reason (module docstring). "First" is the order
    they were started in (`start` numbers them), not the order threads finish them: a failure that
    returns at once (a parse failure) finishes before the answers being executed, and judged by
    completion a run where a fifth of the examples fail was stopped once on a loaded machine. Thread-safe.
    """

    def __init__(self, max_errors: int, streak: int | None = None):
        self.max_errors = int(max_errors)
        self.streak = max(3, self.max_errors) if streak is None else int(streak)
        self.errors = 0
        self.started = 0
        self.first: dict[int, str | None] = {}  # start position -> failure reason (None: it passed)
        self.finished = 0
        self.reasons: set[str | None] = set()  # of every finished rollout
        self.reported = False
        self.first_error: str | None = None
        self._lock = threading.Lock()

    def start(self, n: int) -> int:
        """Number `n` live rollouts about to start; returns the first one's position."""
        with self._lock:
            self.started += n
            return self.started - n

    def observe(self, result: RolloutResult, spent: int, total: int, position: int) -> None:
        with self._lock:
            kind = result.error.split(":", 1)[0] if result.error else None
            if kind is not None and kind not in FORMAT_FAILURES:
                self.errors += 1
                if self.first_error is None:
                    self.first_error = result.error
                    logger.warning("HERO-O: first failing rollout (example %s): %s\n%s", result.example_id,
                                   result.error, result.traceback or "(no traceback)")
            if position < self.streak:
                self.first[position] = kind or result.unscorable
            self.finished += 1
            self.reasons.add(kind or result.unscorable)
            uniform = not self.reported and len(self.reasons) == 1 and None not in self.reasons
            if self.errors > self.max_errors:
                if uniform:  # the streak's rollouts still in flight: the one reason is the better message
                    self._same_reason(f"{self.finished} rollouts to finish", next(iter(self.reasons)), result, spent, total)
                raise RolloutAbort(
                    f"HERO-O stopped: {self.errors} rollouts raised, more than max_errors={self.max_errors} "
                    f"(as dspy.Evaluate); the first: {self.first_error} (its traceback is logged). "
                    f"{spent} of {total} metric calls spent. Fix the program, the LM or the metric, or raise max_errors.")
            reasons = set(self.first.values())
            if len(self.first) == self.streak and not self.reported and len(reasons) == 1 and None not in reasons:
                self._same_reason(f"{self.streak} rollouts", next(iter(reasons)), result, spent, total)

    def _same_reason(self, which: str, why: str | None, result: RolloutResult, spent: int, total: int) -> None:
        self.reported = True
        raise RolloutAbort(
            f"HERO-O stopped: the first {which} all failed for the same reason: {why} "
            f"(example {result.example_id}: {result.error or result.feedback}). Nothing can be learned from "
            f"that; {spent} of {total} metric calls spent. Check the program, its LM, the metric and the "
            f"examples' fields (max_errors={self.max_errors} sets how many such failures are tolerated).")


@dataclass
class RolloutResult:
    """One scored rollout. `traces` maps predictor name -> list of {"inputs", "outputs"} calls;
    `predictor_feedback` holds GEPA-style per-predictor feedback when the metric gives it."""

    example_id: str
    score: float
    feedback: str
    outputs: dict[str, str] = field(default_factory=dict)
    traces: dict[str, list[dict[str, dict[str, str]]]] = field(default_factory=dict)
    error: str | None = None
    lm_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    predictor_feedback: dict[str, str] = field(default_factory=dict)
    feedback_calls: int = 0  # extra metric executions for per-predictor feedback (charged to the budget)
    unscorable: str | None = None  # the metric's "cannot be scored" reason (broken gold, missing field)
    traceback: str | None = None  # of the exception, when the program or metric raised

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("traceback")  # not journaled: long, and replay never needs it
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RolloutResult:
        return cls(**data)


# The group (dspy_hero.fields.GROUP_FIELDS), else the database file, else a schema text: examples
# that share one share the long prompt prefix.
_PREFIX_FIELDS = (*GROUP_FIELDS, "db_path", "db_schema", "graph_schema", "schema")


def prefix_key(group_key: str | None) -> Callable[[Any], str]:
    """The shared-prefix key of an example (its `group_key`, else a database / schema field): rollouts
    that HERO-O may order freely run grouped by it, so consecutive prompts share a long prefix (the
    schema) and prompt caches of the serving engine hit. Only the order changes, never the set."""
    fields = (group_key,) if group_key else _PREFIX_FIELDS

    def key(example: Any) -> str:
        for name in fields:
            value = get_field(example, name)
            if value is not None:
                return str(value)
        return ""

    return key


class RolloutJournal(Protocol):
    """Where completed rollouts go and where a resumed run finds them (see checkpoint.py)."""

    def replay_rollout(self, key: str, example_id: str) -> dict[str, Any] | None: ...

    def record_rollout(self, key: str, example_id: str, result: dict[str, Any]) -> None: ...


def _text(value: Any) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= _MAX_FIELD_CHARS else text[:_MAX_FIELD_CHARS] + " …[truncated]"


def _fields(obj: Any) -> dict[str, str]:
    if obj is None:
        return {}
    items = obj.items() if hasattr(obj, "items") else [("output", obj)]
    return {str(k): _text(v) for k, v in items}


class Rollouts:
    """Evaluates program variants on examples: cache first, journal second, then budget-paid runs.

    The cache key is (instructions key, example id), so a program's score on an example is bought
    once and reused by evidence, acceptance and selection alike.
    """

    def __init__(
        self,
        student: dspy.Module,
        metric: MetricAdapter,
        budget: Any,
        *,
        num_threads: int = 1,
        failure_score: float = 0.0,
        journal: RolloutJournal | None = None,
        display_progress: bool = True,
        order_key: Callable[[Any], str] | None = None,
        input_names: tuple[str, ...] | None | str = "infer",
        fail_fast: FailFast | None = None,
    ):
        self.student = student
        self.metric = metric
        self.budget = budget
        self.num_threads = max(1, int(num_threads or 1))
        self.failure_score = failure_score
        self.journal = journal
        self.display_progress = display_progress
        self.cache: dict[tuple[str, str], RolloutResult] = {}
        self.usage = UsageMeter()
        self.replayed = 0
        self.feedback_calls = 0
        self.order_key = order_key
        # what the program accepts (metrics.base.program_input_names), read once from the student
        self.input_names = program_input_names(student) if isinstance(input_names, str) else input_names
        self.fail_fast = fail_fast
        self._lock = threading.Lock()
        self._programs: dict[str, dspy.Module] = {}
        self._bar: Any = None  # one bar over the whole budget, like GEPA's

    def _progress(self, desc: str) -> Any:
        """The run's rollout bar (created on first use), labelled with the current step."""
        if self._bar is None:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.budget.total, desc="HERO-O rollouts", unit="rollout",
                             disable=not self.display_progress)
        self._bar.set_postfix_str(desc, refresh=False)
        return self._bar

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def error_counts(self) -> dict[str, int]:
        """Failed rollouts by error type (e.g. {"AdapterParseError": 3}) over everything evaluated."""
        counts: dict[str, int] = {}
        for r in self.cache.values():
            if r.error:
                kind = r.error.split(":", 1)[0]
                counts[kind] = counts.get(kind, 0) + 1
        return dict(sorted(counts.items()))

    def cached(self, key: str, example_id: str) -> RolloutResult | None:
        return self.cache.get((key, example_id))

    def run(
        self,
        key: str,
        instructions: dict[str, str],
        examples: list[tuple[str, Any]],
        desc: str = "rollouts",
        limit: int | None = None,
    ) -> dict[str, RolloutResult]:
        """Results for as many of `examples` as are cached or fit in the budget (in order). Named
        `run`, not `evaluate`: it buys rollouts of one prompt variant under the budget, which is not
        what `evaluate_program` or the harness's evaluation of a program on a split means.

        Uncached examples are paid for in order until the budget runs out, so a short budget
        evaluates a prefix; callers read what came back. `limit` caps the paid rollouts of this call.
        """
        out: dict[str, RolloutResult] = {}
        todo: list[tuple[str, Any]] = []
        for ex_id, example in examples:
            hit = self.cache.get((key, ex_id))
            if hit is not None:
                out[ex_id] = hit
            else:
                todo.append((ex_id, example))
        granted = self.budget.take(len(todo) if limit is None else min(len(todo), max(0, limit)))
        todo = todo[:granted]
        live: list[tuple[str, Any]] = []
        for ex_id, example in todo:
            recorded = self.journal.replay_rollout(key, ex_id) if self.journal else None
            if recorded is not None:
                result = RolloutResult.from_dict(recorded)
                self.replayed += 1
                self._charge_feedback(self.budget.take(result.feedback_calls))  # paid as in the original run
                self._store(key, result, journal=False)
                out[ex_id] = result
            else:
                live.append((ex_id, example))
        if live:
            if self.order_key is not None:  # grouped by shared prefix; the set of examples is unchanged
                live.sort(key=lambda item: self.order_key(item[1]))
            program = self._program(key, instructions)
            first = self.fail_fast.start(len(live)) if self.fail_fast is not None else 0
            position = {ex_id: first + i for i, (ex_id, _) in enumerate(live)}
            for result in self._run_many(program, live, desc):
                self._store(key, result, journal=True)
                out[result.example_id] = result
                if self.fail_fast is not None:
                    self.fail_fast.observe(result, self.budget.spent, self.budget.total, position[result.example_id])
        return out

    def _charge_feedback(self, n: int) -> None:
        with self._lock:
            self.feedback_calls += n

    def _store(self, key: str, result: RolloutResult, journal: bool) -> None:
        self.cache[(key, result.example_id)] = result
        self.usage.add(Usage(result.lm_calls, result.input_tokens, result.output_tokens))
        if journal and self.journal is not None:
            self.journal.record_rollout(key, result.example_id, result.to_dict())

    def _program(self, key: str, instructions: dict[str, str]) -> dspy.Module:
        if key not in self._programs:
            self._programs[key] = build_variant(self.student, instructions)
        return self._programs[key]

    def _run_many(self, program: dspy.Module, items: list[tuple[str, Any]], desc: str):
        names = {id(p): n for n, p in program.named_predictors()}
        bar = self._progress(desc)
        try:
            if self.num_threads == 1 or len(items) == 1:
                for ex_id, example in items:
                    yield self.run_one(program, names, ex_id, example)
                    bar.update(1)
                return
            with cf.ThreadPoolExecutor(max_workers=min(self.num_threads, len(items))) as pool:
                futures = [
                    pool.submit(contextvars.copy_context().run, self.run_one, program, names, ex_id, example)
                    for ex_id, example in items
                ]
                try:
                    for fut in cf.as_completed(futures):
                        yield fut.result()
                        bar.update(1)
                except BaseException:
                    for fut in futures:
                        fut.cancel()
                    raise
        finally:
            bar.refresh()

    def run_one(self, program: dspy.Module, names: dict[int, str], ex_id: str, example: Any) -> RolloutResult:
        """One paid rollout; never raises for LM/program/metric failures (they score failure_score),
        only for MetricError (a broken metric)."""
        meter = UsageMeter()
        pred, error, tb = None, None, None
        with dspy.context(trace=[], usage_tracker=meter):
            try:
                pred = program(**program_inputs(program, example, self.input_names))
            except Exception as exc:  # LM timeouts, rate limits, parse failures, program bugs
                error, tb = f"{type(exc).__name__}: {_first_line(exc)}", traceback.format_exc(limit=20)
            trace = list(dspy.settings.trace or [])
        used = meter.total  # the program's LM calls (the metric's own, if any, are not the task LM's)
        traces: dict[str, list[dict[str, dict[str, str]]]] = {}
        for predictor, inputs, outputs in trace:
            name = names.get(id(predictor), type(predictor).__name__)
            traces.setdefault(name, []).append({"inputs": _fields(inputs), "outputs": _fields(outputs)})
        predictor_feedback: dict[str, str] = {}
        extra = 0
        if error is not None:
            score, feedback = self.failure_score, f"The program failed before producing an answer ({error})."
        else:
            try:
                score, feedback = self.metric(example, pred, trace)
                if feedback is None:
                    feedback = f"This trajectory got a score of {score}."
            except MetricError:
                raise
            except Exception as exc:
                error = f"metric raised {type(exc).__name__}: {_first_line(exc)}"
                tb = traceback.format_exc(limit=20)
                score, feedback = self.failure_score, f"The answer could not be scored ({error})."
            if error is None and self.metric.arity == 5 and len(names) > 1:
                predictor_feedback, extra = self._predictor_feedback(example, pred, trace, names)
        return RolloutResult(
            example_id=ex_id,
            score=score,
            feedback=_text(feedback),
            outputs=_fields(pred),
            traces=traces,
            error=error,
            lm_calls=used.calls,
            input_tokens=used.input_tokens,
            output_tokens=used.output_tokens,
            predictor_feedback=predictor_feedback,
            feedback_calls=extra,
            unscorable=unscorable_reason(feedback) if error is None and score < 1.0 else None,
            traceback=tb,
        )

    def _predictor_feedback(self, example: Any, pred: Any, trace: list,
                            names: dict[int, str]) -> tuple[dict[str, str], int]:
        """GEPA-style per-predictor feedback (the metric called with `pred_name`, `pred_trace`), and
        how many extra metric executions it made.

        Each extra execution is a metric call, so it is taken from the budget first; when the budget
        has none left the overall feedback stands in. It only refines the evidence: the rollout's
        score is already known, so a metric that fails here costs that predictor its own feedback,
        not the score. A score outside [0, 1] is still a broken metric (MetricError)."""
        out: dict[str, str] = {}
        asked: set[str] = set()
        extra = 0
        for predictor, inputs, outputs in trace:
            name = names.get(id(predictor))
            if not name or name in asked:
                continue
            asked.add(name)
            if not self.budget.take(1):
                break
            extra += 1
            self._charge_feedback(1)
            try:
                _, fb = self.metric(example, pred, trace, name, [(predictor, inputs, outputs)])
            except MetricError:
                raise
            except Exception as exc:
                logger.debug("per-predictor feedback for %s failed: %s: %s", name, type(exc).__name__, exc)
                continue
            if fb:
                out[name] = fb
        return out, extra


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "")[:500]
