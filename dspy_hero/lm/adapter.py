"""A ChatAdapter that also accepts a program written without DSPy's field markers.

Small local models (e.g. Qwen2.5-Coder-1.5B) follow ChatAdapter's ``[[ ## code ## ]]`` format for a
one-line SQL query but often answer a longer Python task with a bare fenced code block. ChatAdapter
then fails, JSONAdapter fails too, and the rollout scores 0 for its *format*, not its program: on 30
BigCodeBench tasks, 18 of the seed prompt's 30 answers were lost this way. The program is right there
in the response, so this adapter takes it when the markers are missing:

- a signature with a single string output: the whole response is that field (the program field is
  cleaned of fences and prose by `dspy_hero.text.extract_code` afterwards, as before);
- a signature whose ``program_field`` is one of several string outputs: the last fenced code block
  is the program and the text outside it becomes the first other field (e.g. the reviser's reason),
  the rest are empty. Without a fenced block the response is still rejected: a guess is not a parse.

Responses that do carry the markers are parsed exactly as ChatAdapter parses them. A user-configured
adapter always wins (`program_adapter` only applies when none is configured).

Where the instructions go (`InstructionPlacement`; ``BEFORE_LAST_INPUT`` for the task programs'
generator). ChatAdapter puts a signature's instructions in the system message, before a schema of
hundreds of tokens; a 1.5B model then mostly ignores a rule written there. Measured with
Qwen2.5-Coder-1.5B on single-convention questions of the conventions task, seed prompt vs the same
prompt plus one rule (`benchmarks/rule_placement.py`, question before the instructions): a
soft-deletion rule in the system message only fixed 0 of 8, restated after the question as well
(``SYSTEM_AND_RESTATED``) 4 of 8, after the question only (``AFTER_INPUTS``) 0 of 8; a minor-units rule
4, 4 and 5 of 7 (session 6; re-run on today's task in session 21, that soft-deletion rule fixed 1, 0 and,
under ``BEFORE_LAST_INPUT``, 0 of 8).

With the instructions after the question, every rollout recomputed the question, the instructions (a
learned rule included) and DSPy's format reminder, and a candidate's system message made each database's
schema a new prefix per candidate. ``BEFORE_LAST_INPUT`` gives the shared inputs (the schema), then the
instructions and the format reminder, then the per-example input (the question), and leaves the
instructions out of the system message: a rollout computes only its question, and every variant shares
the schema's prefix. Measured on the demo task's 76 questions and 40 Spider questions, each placement on a
fresh default server (`benchmarks/input_layout.py`; RESULTS.md, session 21): prompt tokens computed
22,075 -> 9,325 and wall time 620 -> 412 s on the demo task for the seed and the seed plus the soft-deletion
rule; the seed 4 -> 5 of 76 correct (1:0), the rule 23 -> 32 (10:1; 29:2 against the seed where it was
23:4); the Spider seed 29 -> 32 of 40 (3:0), 137 -> 76 s. Every method's
program goes through this adapter alike (seed, HERO-O, GEPA, MIPROv2), so the comparison stays fair; a
signature with a single input (BigCodeBench's prompt) keeps ``SYSTEM_AND_RESTATED``'s layout.
"""

from __future__ import annotations

import contextlib
import enum
import re
from typing import Any

import dspy
from dspy.adapters.utils import format_field_value
from dspy.utils.exceptions import AdapterParseError

from dspy_hero.text import FENCED_BLOCK

_HEADER = re.compile(r"^\s*\[\[ ## \w+ ## \]\]\s*$", re.MULTILINE)
# Start the instructions in the user message (`dspy_hero.lm.scripted` reads inputs up to either).
RESTATED_HEADER = "Remember the instructions:"
INSTRUCTIONS_HEADER = "Instructions:"
# The system message's objective when the instructions are given after the inputs only.
OBJECTIVE_AFTER_INPUTS = "In adhering to this structure, your objective is given after the inputs."


class InstructionPlacement(enum.Enum):
    """Where a signature's instructions go in the prompt (see module doc for the measurements)."""

    SYSTEM = "system"  # DSPy's ChatAdapter: the system message only
    SYSTEM_AND_RESTATED = "system_and_restated"  # the system message, and again after the inputs
    AFTER_INPUTS = "after_inputs"  # after the inputs only; the system message is the same for every variant
    # The system message, and again (with the format reminder) before the last input: the per-example one
    # goes last, so the shared inputs, the instructions and the reminder form one prefix the server reuses.
    SYSTEM_AND_BEFORE_LAST_INPUT = "system_and_before_last_input"
    # Before the last input only: the system message is AFTER_INPUTS's, the same for every variant, so the
    # shared inputs (a schema) are one prefix for all variants too.
    BEFORE_LAST_INPUT = "before_last_input"


_BEFORE_LAST = (InstructionPlacement.SYSTEM_AND_BEFORE_LAST_INPUT, InstructionPlacement.BEFORE_LAST_INPUT)
_AFTER_INPUTS_ONLY = (InstructionPlacement.AFTER_INPUTS, InstructionPlacement.BEFORE_LAST_INPUT)


class ProgramAdapter(dspy.ChatAdapter):
    """ChatAdapter, plus a fallback for programs answered without field markers (see module doc)."""

    def __init__(self, program_field: str | None = None,
                 placement: InstructionPlacement = InstructionPlacement.SYSTEM, **kwargs: Any):
        super().__init__(**kwargs)
        self.program_field = program_field
        self.placement = InstructionPlacement(placement)

    def _placement(self, signature: type[dspy.Signature]) -> InstructionPlacement:
        """The placement used for this signature: the before-last-input ones need a shared input before the
        last one; a single-input signature is laid out as SYSTEM_AND_RESTATED."""
        if self.placement in _BEFORE_LAST and len(signature.input_fields) < 2:
            return InstructionPlacement.SYSTEM_AND_RESTATED
        return self.placement

    def format_task_description(self, signature: type[dspy.Signature]) -> str:
        if self._placement(signature) in _AFTER_INPUTS_ONLY and (signature.instructions or "").strip():
            return OBJECTIVE_AFTER_INPUTS
        return super().format_task_description(signature)

    def format_user_message_content(self, signature: type[dspy.Signature], inputs: dict[str, Any], prefix: str = "",
                                    suffix: str = "", main_request: bool = False) -> str:
        instructions = (signature.instructions or "").strip()
        placement = self._placement(signature)
        if not (main_request and placement is not InstructionPlacement.SYSTEM and instructions):
            return super().format_user_message_content(signature, inputs, prefix, suffix, main_request)
        header = INSTRUCTIONS_HEADER if placement in _AFTER_INPUTS_ONLY else RESTATED_HEADER
        restated = f"{header}\n{instructions}"
        reminder = self.user_message_output_requirements(signature)
        given = [name for name in signature.input_fields if name in inputs]
        if placement in _BEFORE_LAST and len(given) >= 2:
            last = given[-1]
            shared = super().format_user_message_content(signature.delete(last), inputs, prefix)
            own = f"[[ ## {last} ## ]]\n{format_field_value(signature.input_fields[last], inputs[last])}"
            return "\n\n".join(p for p in (shared, restated, reminder, own, suffix) if p).strip()
        content = super().format_user_message_content(signature, inputs, prefix, suffix, main_request)
        if reminder and content.endswith(reminder):  # before the format reminder, which stays last
            return f"{content[: -len(reminder)].rstrip()}\n\n{restated}\n\n{reminder}"
        return f"{content}\n\n{restated}"

    def parse(self, signature: type[dspy.Signature], completion: str) -> dict[str, Any]:
        try:
            return super().parse(signature, completion)
        except AdapterParseError:
            fields = self._unmarked(signature, completion)
            if fields is None:
                raise
            return fields

    def _unmarked(self, signature: type[dspy.Signature], completion: str) -> dict[str, str] | None:
        outputs = signature.output_fields
        if any(info.annotation is not str for info in outputs.values()):
            return None
        text = _HEADER.sub("", completion or "").strip()
        if not text:
            return None
        if len(outputs) == 1:
            return {next(iter(outputs)): text}
        if self.program_field not in outputs:
            return None
        blocks = list(FENCED_BLOCK.finditer(text))
        if not blocks:
            return None
        last = blocks[-1]
        rest = (text[: last.start()] + text[last.end():]).strip()
        others = [name for name in outputs if name != self.program_field]
        fields = {name: (rest if i == 0 else "") for i, name in enumerate(others)}
        return {self.program_field: last.group(2).strip(), **fields}


def program_adapter(program_field: str | None = None,
                    placement: InstructionPlacement = InstructionPlacement.SYSTEM) -> contextlib.AbstractContextManager:
    """`dspy.context(adapter=ProgramAdapter(...))` unless the caller configured an adapter."""
    if dspy.settings.adapter is not None:
        return contextlib.nullcontext()
    return dspy.context(adapter=ProgramAdapter(program_field, placement=placement))
