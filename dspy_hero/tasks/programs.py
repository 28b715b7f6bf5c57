"""Seed programs: one-predictor DSPy modules that turn a task's inputs into a program text.

The instruction is the shared harness HERO-O optimizes; task inputs go in the user message (paper,
Appendix G), in the order of `input_fields`. Tasks list the inputs shared across examples (db_schema,
graph_schema) before the per-example ones (question, prompt): a local server then reuses the computed
prompt prefix, schema included, from one question of a database to the next. Measured with the 1.5B
model on 12 Spider questions from 2 databases, on 2 cores shared with other test runs (load 3.4-7.0),
runs interleaved: median 7.9 and 3.3 s per rollout against 11.4 and 8.2 s question-first (default
server), 4.4 and 5.3 s against 16.3 and 13.9 s (deterministic server), 11/12 correct against 8/12
(benchmarks/results/throughput.json, plan ``layout``). The module cleans the LM's answer with `extract_code`, so metrics and HERO-T see the
program itself, not the markdown around it.
"""

from __future__ import annotations

from typing import Sequence

import dspy

from dspy_hero.fields import PREDICTION_FIELDS
from dspy_hero.lm.adapter import InstructionPlacement, program_adapter
from dspy_hero.text import extract_code

SEED_INSTRUCTIONS = {
    "sql": "Write one SQLite query that answers the question over the given database schema. "
    "Return only the SQL query.",
    "cypher": "Write one Cypher query that answers the question over the given property-graph schema. "
    "Return only the Cypher query.",
    "python": "Write a self-contained Python function that solves the task. "
    "Return only the Python code, including the imports it needs.",
}


def program_signature(language: str, input_fields: Sequence[str], instructions: str | None = None) -> type:
    """A signature with the given string inputs and the language's program field as output."""
    output = PREDICTION_FIELDS[language]
    fields = {name: (str, dspy.InputField()) for name in input_fields}
    fields[output] = (str, dspy.OutputField(desc=f"the {language.upper() if language != 'python' else 'Python'} program"))
    return dspy.Signature(fields, instructions or SEED_INSTRUCTIONS[language])


class GenerateProgram(dspy.Module):
    """(schema, ...) + question/prompt -> program text, through one `dspy.Predict` named `generate`."""

    def __init__(self, language: str, input_fields: Sequence[str], instructions: str | None = None):
        super().__init__()
        self.language = language
        self.output_field = PREDICTION_FIELDS[language]
        self.generate = dspy.Predict(program_signature(language, input_fields, instructions))

    def forward(self, **inputs) -> dspy.Prediction:
        # Examples may also carry environment references (db_path, graph, ...) as inputs so that
        # HERO-T can reach the environment; the LM sees only the signature's own input fields.
        wanted = self.generate.signature.input_fields
        # A program answered without field markers still counts; the instructions come after the shared
        # inputs, where a small model follows them, and the question last, so a database's questions share
        # the prefix through the instructions and every variant shares the schema (lm/adapter.py, measured).
        with program_adapter(placement=InstructionPlacement.BEFORE_LAST_INPUT):
            pred = self.generate(**{k: v for k, v in inputs.items() if k in wanted})
        raw = getattr(pred, self.output_field, "") or ""
        return dspy.Prediction(**{self.output_field: extract_code(raw, self.language)}, raw_output=raw)
