"""A ReAct-style test-time baseline: execute, observe, revise, with no evidence gate (paper, B.2).

The shared instructions stay fixed; the current program is executed in the instance's environment
and, while execution fails or the environment's own checks complain, the LM revises it from the
observation. At most `max_interactions` environment interactions (paper: 3); the last revision is
submitted whatever it is, which is the point of comparison with HERO-T's gated refinement.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import dspy

from dspy_hero.execution.base import ENVIRONMENT, failed
from dspy_hero.fields import ENVIRONMENT_FIELDS, PREDICTION_FIELDS
from dspy_hero.lm.adapter import program_adapter
from dspy_hero.metrics.base import program_input_names
from dspy_hero.text import extract_code

_REVISE_NOTE = (
    "\n\nYou wrote the program below earlier; it was executed and the observation is shown. If the "
    "observation shows an error or a problem, return a corrected complete program; otherwise return it unchanged."
)


def _generate_predictor(generator: dspy.Module) -> dspy.Predict:
    preds = generator.named_predictors()
    if not preds:
        raise ValueError("ReActRefine needs a generator with at least one predictor")
    return preds[-1][1]


class ReActRefine(dspy.Module):
    """Generator + up to `max_interactions` execute-and-revise steps, no gate.

    `environment_for(inputs_example) -> Environment` builds the environment from the call's inputs
    (environment references such as ``db_path`` are example inputs). `interactions` counts environment
    executions over all calls (thread-safe), for actions-per-query figures.
    """

    def __init__(self, generator: dspy.Module, environment_for: Callable[[Any], Any], language: str,
                 max_interactions: int = 3):
        super().__init__()
        if max_interactions < 1:
            raise ValueError(f"max_interactions must be >= 1, got {max_interactions}")
        self.generator = generator
        self.environment_for = environment_for
        self.language = language
        self.max_interactions = max_interactions
        self.field = PREDICTION_FIELDS[language]
        base = _generate_predictor(generator).signature
        revise = base.append("previous_program", dspy.InputField(desc="the program you wrote earlier"), type_=str)
        revise = revise.append("observation", dspy.InputField(desc="what executing it showed"), type_=str)
        # keep the program output last so ChatAdapter asks for it after all inputs
        out_field = revise.output_fields[self.field]
        revise = revise.delete(self.field).append(self.field, out_field, type_=str)
        self.revise = dspy.Predict(revise.with_instructions(base.instructions + _REVISE_NOTE))
        self._generator_inputs = program_input_names(generator)  # None: it accepts anything
        self.interactions = 0
        self.calls = 0
        self._lock = threading.Lock()

    def accepted_inputs(self) -> tuple[str, ...] | None:
        """The generator's inputs plus the environment references (e.g. ``db_path``), which reach the
        environment only: without them an evaluation that passes each program just what it accepts
        (`program_input_names`) leaves the environment nothing to execute in."""
        names = self._generator_inputs
        return None if names is None else tuple(dict.fromkeys([*names, *ENVIRONMENT_FIELDS]))

    def forward(self, **inputs: Any) -> dspy.Prediction:
        names = self._generator_inputs
        pred = self.generator(**{k: v for k, v in inputs.items() if names is None or k in names})
        program = getattr(pred, self.field, "") or ""
        env = self.environment_for(dspy.Example(**inputs).with_inputs(*inputs))
        wanted = set(self.revise.signature.input_fields) - {"previous_program", "observation"}
        steps = []
        for _ in range(self.max_interactions):
            # An environment failure is an observation, as in HERO-T, not a crash of the example.
            try:
                execution = env.execute(program)
                ok, why = env.check(program, execution) if execution.ok else (False, "")
            except Exception as exc:  # noqa: BLE001
                execution, ok, why = failed(ENVIRONMENT, f"{type(exc).__name__}: {exc}"), False, ""
            observation = execution.describe() + ("" if ok or not why else f"\nCheck: {why}")
            steps.append({"program": program, "ok": bool(execution.ok and ok), "observation": observation})
            with self._lock:
                self.interactions += 1
            if execution.ok and ok:
                break
            with program_adapter():
                revised = self.revise(previous_program=program, observation=observation,
                                      **{k: v for k, v in inputs.items() if k in wanted})
            program = extract_code(getattr(revised, self.field, "") or "", self.language) or program
        with self._lock:
            self.calls += 1
        return dspy.Prediction(**{self.field: program}, react_steps=steps)
