"""What all execution metrics share: the Verdict record, the DSPy metric calling convention (how a
2/3/5-argument metric is called and how its float / bool / Prediction / dict result is read: one
`normalize_metric_output` behind `MetricAdapter`, `score_of` and `feedback_of`), code
extraction from LM output, and which of an example's fields a program is called with.

The example-field contract (input, environment and label fields per language, the prediction
field, and the one field reader) is `dspy_hero.fields`.

Scores are in [0, 1] everywhere in dspy-hero (as for GEPA); `dspy.Evaluate` reports 0-100.
"""

from __future__ import annotations

import inspect
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_hero.fields import ENVIRONMENT_FIELDS, LABEL_FIELDS, PREDICTION_FIELDS, get_field
from dspy_hero.text import FENCED_BLOCK, extract_code  # noqa: F401  (re-exported: metrics read programs this way)


@dataclass(frozen=True)
class Verdict:
    """A judged execution: a score in [0, 1] and feedback a reflector may read.

    Feedback names the error type and what is observable; by default it never contains the expected
    output or the gold program, so it can be shown to a reflection LM without leaking labels.
    """

    score: float
    feedback: str

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.score) <= 1.0:
            raise ValueError(f"Verdict score must be in [0, 1], got {self.score!r}")

    def to_prediction(self) -> dspy.Prediction:
        return MetricResult(score=float(self.score), feedback=self.feedback)


class MetricResult(dspy.Prediction):
    """``dspy.Prediction(score=..., feedback=...)`` that is truthy only for a full score.

    DSPy's bootstrapping (BootstrapFewShot, MIPROv2's demo search) keeps a trace as a demo when
    ``metric(gold, pred, trace)`` is truthy, and a plain Prediction is truthy whatever its score,
    so without this every failed program would be kept. Comparisons and sums still use the score.
    """

    def __bool__(self) -> bool:
        return float(self.score) >= 1.0


def prediction_text(pred: Any, field: str) -> str:
    """Read the program field from a Prediction, dict or plain string without raising."""
    if pred is None:
        return ""
    if isinstance(pred, str):
        return pred
    if isinstance(pred, dict):
        return pred.get(field, "") or ""
    try:
        value = pred[field] if field in pred else getattr(pred, field, "")
    except Exception:
        value = getattr(pred, field, "")
    return value or ""


def output_names(pred: Any) -> list[str] | None:
    """The output field names of a Prediction, dict or object (None for a plain string: no fields)."""
    if pred is None or isinstance(pred, str):
        return None
    if isinstance(pred, dict):
        return [str(k) for k in pred]
    keys = getattr(pred, "keys", None)
    if callable(keys):
        try:
            return [str(k) for k in keys()]
        except Exception:
            pass
    return sorted(k for k in vars(pred) if not k.startswith("_")) if hasattr(pred, "__dict__") else []


def has_output(pred: Any, field: str) -> bool:
    """Does the prediction carry `field` at all (an empty value counts as present)? A string does."""
    names = output_names(pred)
    return names is None or field in names


def missing_field_verdict(pred: Any, field: str) -> Verdict | None:
    """A zero Verdict saying which field is missing when `pred` lacks `field`, else None."""
    if pred is None or has_output(pred, field):
        return None
    names = [n for n in (output_names(pred) or []) if n != "reasoning"]
    hint = f"; pass prediction_field={names[0]!r} to the metric" if len(names) == 1 else ""
    return Verdict(0.0, f"MissingField: the prediction has no field {field!r} (its fields: "
                        f"{', '.join(output_names(pred) or []) or 'none'}){hint}.")


# Feedback openings of verdicts that say the EXAMPLE (not the program) cannot be scored: a broken
# reference, an unreachable environment, a prediction without the metric's field. The same one on
# every rollout means a broken setup, which HERO-O's fail-fast stops (optimizer/rollout.py).
_UNSCORABLE = ("gold query failed", "MissingField:", "EnvironmentError:", "failed: the reference solution")


def unscorable_reason(feedback: Any) -> str | None:
    """The reason part of a "cannot be scored" feedback (up to its first ';' or '('), else None."""
    text = str(feedback or "")
    if not text.startswith(_UNSCORABLE) and "cannot be scored" not in text:
        return None
    return re.split(r"[;(]", text, maxsplit=1)[0].strip()


def program_input_names(program: Any) -> tuple[str, ...] | None:
    """The keyword inputs `program` accepts, or None when it accepts anything.

    Why: DSPy programs are called with ``**example.inputs()``; an input the program does not declare
    makes `dspy.Predict` log "Input contains fields not in signature" on every call and a custom
    ``forward(self, question, db_schema)`` raise TypeError. In order: a program's own
    ``accepted_inputs()`` (HeroRefine: its generator's inputs plus the environment references), a
    `dspy.Predict`'s signature inputs, else the forward's named parameters, plus, when it takes
    ``**kwargs``, the inputs of its predictors that no predictor produces (ChainOfThought, ...).
    """
    own = getattr(program, "accepted_inputs", None)
    if callable(own):
        names = own()
        return None if names is None else tuple(names)
    if isinstance(program, dspy.Predict):
        return tuple(program.signature.input_fields)
    try:
        params = list(inspect.signature(_forward_of(program)).parameters.values())
    except (TypeError, ValueError):
        return None
    named = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self"]
    if not any(p.kind == p.VAR_KEYWORD for p in params):
        return tuple(named)
    predictors = [p for _, p in program.named_predictors()] if hasattr(program, "named_predictors") else []
    if not predictors:
        return None
    produced = {n for p in predictors for n in p.signature.output_fields}
    for p in predictors:
        named += [n for n in p.signature.input_fields if n not in produced and n not in named]
    return tuple(named)


def _forward_of(program: Any) -> Any:
    """The callable whose parameters a program takes: its class's ``forward`` (read from the class, since
    DSPy warns on every instance access to ``forward``), else the program itself."""
    return getattr(type(program), "forward", None) or program


def required_inputs(program: Any) -> tuple[str, ...]:
    """The forward parameters without a default (a call without them raises TypeError)."""
    if isinstance(program, dspy.Predict) or callable(getattr(program, "accepted_inputs", None)):
        return ()
    try:
        params = inspect.signature(_forward_of(program)).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                 and p.default is p.empty and p.name != "self")


def program_inputs(program: Any, example: Any, names: tuple[str, ...] | None | str = "infer") -> dict[str, Any]:
    """The keyword arguments to call `program` with on `example`: the example's inputs the program
    accepts, plus the environment references it names even when they are not marked as inputs.
    Label fields are never passed. `names` is `program_input_names(program)`, computed once by callers
    that call the same program many times."""
    if isinstance(names, str):
        names = program_input_names(program)
    marked = dict(example.inputs()) if hasattr(example, "inputs") else dict(example)
    if names is None:
        return {k: v for k, v in marked.items() if k not in LABEL_FIELDS}
    out: dict[str, Any] = {}
    for name in names:
        if name in LABEL_FIELDS:
            continue
        if name in marked:
            out[name] = marked[name]
        elif name in ENVIRONMENT_FIELDS and get_field(example, name) is not None:
            out[name] = get_field(example, name)
    return out


def require_fields(example: Any, fields: tuple[str, ...], metric_name: str) -> None:
    """Fail with a clear message when an example lacks what the metric needs."""
    missing = [f for f in fields if get_field(example, f) is None]
    if missing:
        raise KeyError(
            f"{metric_name} needs example field(s) {missing}; see dspy_hero.fields for the conventions"
        )


JudgeFn = Callable[[Any, Any], Verdict]


class ExecutionMetric:
    """A DSPy metric function built from a judge ``(gold_example, prediction) -> Verdict``.

    Callable as ``metric(gold, pred)``, ``metric(gold, pred, trace)`` or GEPA's
    ``metric(gold, pred, trace, pred_name, pred_trace)``; always returns
    ``dspy.Prediction(score=..., feedback=...)``, which `dspy.Evaluate` reads as its score and GEPA
    reads as score plus feedback. With a `trace` (bootstrapping), DSPy expects a pass/fail signal and
    tests the result's truth: a `MetricResult` is true only for a score of 1.

    Instances are thread-safe if their judge is (each judge opens fresh connections per call).
    """

    def __init__(self, judge: JudgeFn, name: str, language: str, close: Callable[[], None] | None = None,
                 prediction_field: str | None = None):
        if prediction_field is not None and (not isinstance(prediction_field, str) or not prediction_field.isidentifier()):
            raise ValueError(f"prediction_field must be a field name such as 'sql', got {prediction_field!r}")
        self.judge = judge
        self.__name__ = name
        self.language = language
        self.prediction_field = prediction_field or PREDICTION_FIELDS[language]
        self._close = close

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None) -> dspy.Prediction:
        return self.verdict(gold, pred).to_prediction()

    def verdict(self, gold, pred) -> Verdict:
        """The judge's verdict on the prediction's `prediction_field`. Judges read the language's
        default field, so another field is handed over under that name; a prediction without the
        field at all gets feedback that names the field and the ones it has (not "no SQL query")."""
        missing = missing_field_verdict(pred, self.prediction_field)
        if missing is not None:
            return missing
        default = PREDICTION_FIELDS[self.language]
        if self.prediction_field != default and not isinstance(pred, str):
            pred = dspy.Prediction(**{default: prediction_text(pred, self.prediction_field)})
        return self.judge(gold, pred)

    def close(self) -> None:
        """Release engines the metric started (e.g. an embedded Cypher server)."""
        if self._close is not None:
            self._close()

    def __repr__(self) -> str:
        return f"ExecutionMetric({self.__name__!r}, language={self.language!r})"


# --- the metric calling convention --------------------------------------------------------------


class MetricError(ValueError):
    """The metric is unusable: wrong signature, wrong return type, or a score outside [0, 1]."""


class MetricAdapter:
    """Calls a DSPy/GEPA metric the way it was written and normalizes what it returns.

    Accepts 2-argument ``(gold, pred)``, 3-argument ``(gold, pred, trace)`` and GEPA's 5-argument
    ``(gold, pred, trace, pred_name, pred_trace)`` metrics, found by binding the signature (most
    arguments first). Returns may be a float/int/bool, a ``dspy.Prediction(score=, feedback=)``, or a
    dict with ``score`` (and optionally ``feedback``).
    """

    def __init__(self, metric: Callable[..., Any]):
        if not callable(metric):
            raise MetricError(f"metric must be callable, got {type(metric).__name__}")
        self.metric = metric
        self.arity = _arity(metric)

    def __call__(self, gold, pred, trace=None, pred_name=None, pred_trace=None) -> tuple[float, str | None]:
        if self.arity == 5:
            out = self.metric(gold, pred, trace, pred_name, pred_trace)
        elif self.arity == 3:
            out = self.metric(gold, pred, trace)
        else:
            out = self.metric(gold, pred)
        return normalize_metric_output(out)


def _arity(fn: Callable[..., Any]) -> int:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return 5
    for n in (5, 3, 2):
        try:
            sig.bind(*([None] * n))
            return n
        except TypeError:
            continue
    raise MetricError(
        f"metric {getattr(fn, '__name__', fn)!r} must accept (gold, pred), (gold, pred, trace) or "
        "(gold, pred, trace, pred_name, pred_trace)"
    )


def normalize_metric_output(out: Any) -> tuple[float, str | None]:
    """(score, feedback) from any supported metric return value; MetricError if unusable."""
    feedback = None
    if isinstance(out, (bool, int, float)):
        score = float(out)
    elif isinstance(out, dict):
        if "score" not in out:
            raise MetricError(f"metric returned a dict without 'score': keys {sorted(out)}")
        score, feedback = out["score"], out.get("feedback")
    elif hasattr(out, "score"):
        score, feedback = out.score, getattr(out, "feedback", None)
    else:
        raise MetricError(
            f"metric returned {type(out).__name__}; expected a float, a bool, "
            "dspy.Prediction(score=..., feedback=...) or a dict with 'score'"
        )
    try:
        score = float(score)
    except (TypeError, ValueError) as exc:
        raise MetricError(f"metric score {score!r} is not a number") from exc
    if not math.isfinite(score) or not 0.0 <= score <= 1.0:
        raise MetricError(
            f"metric returned score {score!r}; dspy-hero (like GEPA) needs scores in [0, 1]. "
            "Rescale the metric (dspy.Evaluate's 0-100 percentages are not metric scores)."
        )
    return score, (None if feedback is None else str(feedback))


def score_of(result: Any) -> float:
    """The score of any metric result (`normalize_metric_output`); MetricError if unusable."""
    return normalize_metric_output(result)[0]


def feedback_of(result: Any) -> str | None:
    """The feedback of any metric result, None when it has none (`normalize_metric_output`)."""
    return normalize_metric_output(result)[1]


class LRUCache:
    """A small thread-safe least-recently-used map: each metric object keeps its gold executions here
    (per object, not global), so a gold program runs once however many predictions it judges."""

    def __init__(self, size: int):
        self.size = int(size)
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)
