"""Log a finished HERO-O compile to MLflow: its settings, per-round figures, the final selection score,
the final instructions and the whole `HeroResult`.

It logs when the user asked MLflow to watch: an active run (``with mlflow.start_run(): ...``), or DSPy
autologging (``mlflow.dspy.autolog()`` or ``mlflow.autolog()``) enabled, before or after dspy_hero was
imported. Autologging patches ``compile`` only on the Teleprompter subclasses that exist when it is
called, so it cannot be relied on to see HERO-O; this module checks autologging's configuration at
the end of compile instead, which does not depend on import order. With autologging on and no run
active, it starts (and ends) a run named ``hero-o``; otherwise it logs into the active run.

When mlflow was never imported nothing can be active, so it is not imported here either (it is slow
to import). A failure to log is a warning, never a failed compile: the optimized program is already
paid for.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import Any

from dspy_hero.optimizer.result import HeroResult

logger = logging.getLogger(__name__)

__all__ = ["log_compile"]

PREFIX = "hero."
ARTIFACT_DIR = "hero"
_PARAM_CHARS = 500  # MLflow caps a param value at 6000 characters; settings are names and numbers


def log_compile(optimizer_settings: Mapping[str, Any], result: HeroResult) -> None:
    """Log one compile's settings and outcome to MLflow; a no-op when mlflow is absent or not active."""
    mlflow = sys.modules.get("mlflow")
    if mlflow is None:
        return
    try:
        own_run = mlflow.active_run() is None
        if own_run and not _autolog_enabled():
            return
        if own_run:
            mlflow.start_run(run_name="hero-o")
        try:
            _log(mlflow, optimizer_settings, result)
        finally:
            if own_run:
                mlflow.end_run()
    except Exception as exc:  # noqa: BLE001 -- the compile succeeded; losing its log must not lose the program
        logger.warning("HERO-O could not log the compile to MLflow (%s: %s); check the tracking URI "
                       "(MLFLOW_TRACKING_URI) and that the store is writable", type(exc).__name__, exc)


def _autolog_enabled() -> bool:
    """Whether DSPy autologging is on (mlflow.dspy.autolog() or mlflow.autolog() was called)."""
    from mlflow.utils.autologging_utils import autologging_is_disabled

    return not autologging_is_disabled("dspy")


def _log(mlflow: Any, settings: Mapping[str, Any], result: HeroResult) -> None:
    mlflow.log_params({f"{PREFIX}{k}": v for k, v in settings_params(settings).items()})
    for step, figures in round_figures(result).items():
        mlflow.log_metrics(figures, step=step)
    mlflow.log_metrics(final_figures(result))
    mlflow.set_tag(f"{PREFIX}final_entry_id", result.final_entry_id)
    mlflow.log_dict(dict(result.final_instructions), f"{ARTIFACT_DIR}/final_instructions.json")
    for name, text in result.final_instructions.items():
        mlflow.log_text(text, f"{ARTIFACT_DIR}/instructions/{name}.txt")
    # default=str: a HeroResult holds only plain data, but a custom decision object may not.
    mlflow.log_text(json.dumps(result.to_dict(), indent=2, default=str), f"{ARTIFACT_DIR}/hero_result.json")


def settings_params(settings: Mapping[str, Any]) -> dict[str, str | int | float | bool]:
    """The optimizer's settings as MLflow params: numbers, strings and flags as they are, `None` as
    "None", models by their model name, functions by their qualified name, other objects by class."""
    out: dict[str, str | int | float | bool] = {}
    for key, value in sorted(settings.items()):
        if key.startswith("_"):
            continue
        out[key] = _param_value(value)
    return out


def _param_value(value: Any) -> str | int | float | bool:
    if isinstance(value, (bool, int, float, str)):
        return value if not isinstance(value, str) else value[:_PARAM_CHARS]
    if value is None:
        return "None"
    if isinstance(value, (list, tuple)) and all(isinstance(v, (bool, int, float, str, type(None))) for v in value):
        return str(list(value))[:_PARAM_CHARS]
    model = getattr(value, "model", None)
    if isinstance(model, str):  # a dspy.LM
        return model
    name = getattr(value, "__qualname__", None)
    if callable(value) and isinstance(name, str):
        return f"{getattr(value, '__module__', '')}.{name}".lstrip(".")
    return type(value).__name__


def round_figures(result: HeroResult) -> dict[int, dict[str, float]]:
    """Per round (the MLflow step): its metric calls, diagnosis failures, candidates tested and adopted,
    and the run's cumulative metric calls and adopted fixes/breaks after it."""
    cumulative = {c["round"]: c for c in result.cumulative_fix_break}
    out: dict[int, dict[str, float]] = {}
    for rec in result.rounds:
        tested = [c for c in rec.candidates if c.decision is not None]
        figures = {
            "round_metric_calls": rec.metric_calls,
            "diagnosis_cases": len(rec.diagnosis_cases),
            "diagnosis_failing": sum(not c.get("passed") for c in rec.diagnosis_cases),
            "candidates": len(rec.candidates),
            "candidates_tested": len(tested),
            "candidates_accepted": sum(c.decision.accepted for c in tested),
            "round_fixes": sum(c.decision.fixes for c in tested),
            "round_breaks": sum(c.decision.breaks for c in tested),
            "round_adopted": rec.adopted_candidate_id is not None,
        }
        cum = cumulative.get(rec.round)
        if cum is not None:
            figures.update(metric_calls=cum["metric_calls"], adopted_fixes=cum["adopted_fixes"],
                           adopted_breaks=cum["adopted_breaks"])
        out[rec.round] = {f"{PREFIX}{k}": float(v) for k, v in figures.items()}
    return out


def final_figures(result: HeroResult) -> dict[str, float]:
    """The run's totals and the final selection score (the selected archive entry's mean score on the
    selection pool; absent when only the seed was in the archive, so no selection was run)."""
    figures: dict[str, float] = {
        "total_metric_calls": result.total_metric_calls,
        "budget": result.budget,
        "rounds": len(result.rounds),
        "rounds_adopted": sum(r.adopted_candidate_id is not None for r in result.rounds),
        "adopted_fixes": result.adopted_fixes,
        "adopted_breaks": result.adopted_breaks,
        "overall_fixes": result.overall_fixes,
        "overall_breaks": result.overall_breaks,
        "final_prompt_tokens": result.final_prompt_tokens,
        "task_lm_calls": result.task_lm.calls,
        "task_lm_tokens": result.task_lm.tokens,
        "reflection_lm_calls": result.reflection_lm.calls,
        "reflection_lm_tokens": result.reflection_lm.tokens,
    }
    selected = [e for e in result.archive if e.selected]
    if selected and selected[0].selection_mean is not None:
        figures["selection_score"] = selected[0].selection_mean
        figures["selection_examples"] = selected[0].selection_n
    return {f"{PREFIX}{k}": float(v) for k, v in figures.items()}
