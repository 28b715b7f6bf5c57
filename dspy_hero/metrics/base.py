"""What all execution metrics share: the Verdict record, the DSPy metric calling convention, code
extraction from LM output, and the field conventions examples follow.

Field conventions (the contract between tasks, metrics, HERO-O and HERO-T):

=========  =======================================================  ================
language   example fields (inputs first, then labels)               prediction field
=========  =======================================================  ================
SQL        question, [db_schema], [evidence], db_id, db_path |       ``sql``
           gold_sql
Cypher     question, [graph_schema], graph (a graph name or a file path  ``cypher``
           the engine loads) | gold_cypher
Python     prompt, [code_prompt], entry_point | test_code            ``code``
           (unit tests, BigCodeBench semantics) or
           prompt, [code_prompt] | ground_truth_code, test_script
           (output comparison, DSCodeBench semantics)
=========  =======================================================  ================

Environment references (``db_path``, ``db_id``, ``graph``, ``graph_source``, ``engine``,
``entry_point``, ``code_prompt``) need not be marked as inputs: metrics and environments read them from
the whole example, and HERO-O, HERO-T and `evaluate_program` pass a program only the inputs it accepts
(`program_inputs`: its forward's parameters or its predictors' signature inputs, plus any environment
reference it names). They may still be marked, so that a plain `dspy.Evaluate` passes them to HERO-T.

The prediction field is the language's default above; every metric factory takes
``prediction_field=`` for a program whose output is named otherwise (``query``, ``answer``, ...).

Labels (``gold_sql``, ``gold_cypher``, ``test_code``, ``ground_truth_code``, ``test_script``,
``canonical_solution``) must not
be marked as inputs: DSPy programs never see them, HERO-T never reads them.

Scores are in [0, 1] everywhere in dspy-hero (as for GEPA); `dspy.Evaluate` reports 0-100.
"""

from __future__ import annotations

import inspect
import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dspy

from dspy_hero.text import FENCED_BLOCK, extract_code  # noqa: F401  (re-exported: metrics read programs this way)

PREDICTION_FIELDS = {"sql": "sql", "cypher": "cypher", "python": "code"}
# Labels: never LM inputs, never read by HERO-T. canonical_solution is BigCodeBench's reference program.
LABEL_FIELDS = ("gold_sql", "gold_cypher", "test_code", "ground_truth_code", "test_script", "canonical_solution")
# Fields that locate an environment: passed to a program that names them even when not marked as inputs.
ENVIRONMENT_REFERENCES = ("db_path", "db_id", "graph", "graph_source", "engine", "entry_point", "code_prompt")


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
        elif name in ENVIRONMENT_REFERENCES and _get(example, name) is not None:
            out[name] = _get(example, name)
    return out


def label_inputs(example: Any) -> list[str]:
    """The label fields an example marks as inputs (they would reach the program and the reflector)."""
    try:
        keys = example.inputs().keys()
    except Exception:
        return []
    return [k for k in keys if k in LABEL_FIELDS]


def require_fields(example: Any, fields: tuple[str, ...], metric_name: str) -> None:
    """Fail with a clear message when an example lacks what the metric needs."""
    missing = [f for f in fields if _get(example, f) is None]
    if missing:
        raise KeyError(
            f"{metric_name} needs example field(s) {missing}; see dspy_hero.metrics.base for the conventions"
        )


def _get(example: Any, name: str) -> Any:
    if isinstance(example, dict):
        return example.get(name)
    try:
        return example[name] if name in example else getattr(example, name, None)
    except Exception:
        return getattr(example, name, None)


def get_field(example: Any, name: str, default: Any = None) -> Any:
    """Read a field from a dspy.Example, a dict or an object; `default` when absent."""
    value = _get(example, name)
    return default if value is None else value


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


def score_of(result: Any) -> float:
    """The score of any metric result: float, bool, Prediction(score=...) or dict."""
    if isinstance(result, (int, float)):
        return float(result)
    if isinstance(result, dict):
        return float(result.get("score", 0.0))
    score = getattr(result, "score", None)
    if score is None:
        try:
            score = result["score"]
        except Exception as exc:
            raise TypeError(f"metric returned {type(result).__name__}, expected a float or a score") from exc
    return float(score)


def feedback_of(result: Any) -> str | None:
    if isinstance(result, dict):
        return result.get("feedback")
    return getattr(result, "feedback", None)


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
