"""Which fields go where: the generator's inputs, the environment's references, and never the labels.

HERO-T is label-free by construction: it reads an instance only field by field, by name, from two
lists (the generator's signature inputs and the contract's `ENVIRONMENT_FIELDS`, see
`dspy_hero.fields`), and refuses label names outright (`read_unlabeled`). Nothing here iterates
over an example's keys, so a label stored on it is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dspy_hero.fields import ENVIRONMENT_FIELDS, LABEL_FIELDS, LANGUAGE_OF_OUTPUT, PREDICTION_FIELDS, read_unlabeled

_READER = "HERO-T"


@dataclass(frozen=True)
class GeneratorIO:
    """What a program-generation module reads and writes."""

    input_fields: tuple[str, ...]
    output_field: str
    language: str | None


def generator_io(generator: Any) -> GeneratorIO:
    """Input fields (inputs of any predictor that no predictor produces), the program output field and
    the language, read from the generator's predictors.

    The output field is the generator's `output_field` attribute when it has one (GenerateProgram),
    else the last predictor's output named sql/cypher/code, else its last output field.
    """
    predictors = [p for _, p in generator.named_predictors()] if hasattr(generator, "named_predictors") else []
    if not predictors:
        raise TypeError(f"generator {type(generator).__name__} has no DSPy predictors; pass a dspy.Module")
    produced = {name for p in predictors for name in p.signature.output_fields}
    inputs: list[str] = []
    for p in predictors:
        inputs += [n for n in p.signature.input_fields if n not in produced and n not in inputs]
    output = getattr(generator, "output_field", None)
    if not isinstance(output, str):
        outs = list(predictors[-1].signature.output_fields)
        output = next((o for o in outs if o in LANGUAGE_OF_OUTPUT), outs[-1])
    language = getattr(generator, "language", None)
    if language not in PREDICTION_FIELDS:
        language = LANGUAGE_OF_OUTPUT.get(output)
    return GeneratorIO(tuple(inputs), output, language)


def gather_inputs(io: GeneratorIO, example: Any = None, **given: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split one call's inputs into (generator inputs, environment references).

    Keyword arguments win over the example. Labels passed as keywords are dropped unread: a caller
    doing `refiner(**example)` must not leak them into any prompt.
    """
    given = {k: v for k, v in given.items() if k not in LABEL_FIELDS}
    gen: dict[str, Any] = {}
    for name in io.input_fields:
        value = given[name] if name in given else read_unlabeled(example, name, _READER)
        if value is not None:
            gen[name] = value
    env: dict[str, Any] = {}
    for name in ENVIRONMENT_FIELDS:
        value = given[name] if name in given else read_unlabeled(example, name, _READER)
        if value is not None:
            env[name] = value
    env.update({k: v for k, v in given.items() if k not in io.input_fields and k not in env})
    return gen, env


def render_task(inputs: dict[str, Any], max_chars: int = 6000) -> str:
    """The task as the refiner reads it: each generator input under its name."""
    parts = [f"{name}: {value}" for name, value in inputs.items()]
    text = "\n".join(parts)
    return text if len(text) <= max_chars else text[: max_chars - 20] + "\n... (cut)"
