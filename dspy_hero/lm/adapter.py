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
"""

from __future__ import annotations

import contextlib
import re
from typing import Any

import dspy
from dspy.utils.exceptions import AdapterParseError

from dspy_hero.text import FENCED_BLOCK

_HEADER = re.compile(r"^\s*\[\[ ## \w+ ## \]\]\s*$", re.MULTILINE)


class ProgramAdapter(dspy.ChatAdapter):
    """ChatAdapter, plus a fallback for programs answered without field markers (see module doc)."""

    def __init__(self, program_field: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.program_field = program_field

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


def program_adapter(program_field: str | None = None) -> contextlib.AbstractContextManager:
    """`dspy.context(adapter=ProgramAdapter(...))` unless the caller configured an adapter."""
    if dspy.settings.adapter is not None:
        return contextlib.nullcontext()
    return dspy.context(adapter=ProgramAdapter(program_field))
