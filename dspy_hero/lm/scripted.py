"""Deterministic scripted LMs: a custom DSPy engine whose answers are a Python function of the request.

Tests and the offline simulation mode use these so the optimizer's and refiner's mechanics can be
checked exactly and in milliseconds. A script sees the parsed request (instructions, input fields,
raw messages) and returns either a dict of output fields (formatted the way DSPy's ChatAdapter
parses them) or raw text (to simulate malformed output). It may raise to simulate a failing LM.

Usage::

    def answer(req: ScriptedRequest) -> dict:
        if "COUNT(*)" in req.instructions:
            return {"sql": "SELECT COUNT(*) FROM singer"}
        return {"sql": "SELECT * FROM singer"}

    lm = scripted_lm(answer)          # a real dspy.LM with a custom engine, cache disabled
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import dspy
from dspy.lm15 import Message, Response, Usage

from dspy_hero.lm.adapter import INSTRUCTIONS_HEADER, RESTATED_HEADER
from dspy_hero.text import approx_tokens  # noqa: F401  (re-exported for tests)

_FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\[\[ ## \w+ ## \]\]|\Z)", re.DOTALL)
_OBJECTIVE = "your objective is:"


@dataclass(frozen=True)
class ScriptedRequest:
    """A request as a script sees it."""

    system: str
    user: str
    instructions: str
    inputs: dict[str, str]
    output_fields: tuple[str, ...]
    messages: tuple[tuple[str, str], ...]
    wants_json: bool = False
    temperature: float | None = None  # the request's sampling temperature (None: the LM's default)
    seed: int | None = None  # the request's sampling seed (None: the LM's default)


def parse_request(request: Any) -> ScriptedRequest:
    system = request.system if isinstance(request.system, str) else "".join(
        getattr(p, "text", "") for p in (request.system or ())
    )
    messages = tuple((m.role, m.text or "") for m in request.messages)
    # DSPy puts few-shot demos before the real input; the last user message is the real one.
    user = next((text for role, text in reversed(messages) if role == "user"), "")
    body, _, reminder = user.partition("\n\nRespond with")
    body, _, after_inputs = body.partition(f"\n\n{INSTRUCTIONS_HEADER}\n")
    body = body.split(f"\n\n{RESTATED_HEADER}", 1)[0]
    last_input = reminder.partition("\n\n")[2]  # an input given after the reminder (the BEFORE_LAST_INPUT placements)
    inputs = {name: value.strip() for name, value in _FIELD.findall(body) + _FIELD.findall(last_input)}
    instructions = after_inputs.strip()  # instructions given after the inputs only
    lowered = system.lower()
    if not instructions and _OBJECTIVE in lowered:
        start = lowered.index(_OBJECTIVE) + len(_OBJECTIVE)
        instructions = textwrap.dedent(system[start:]).strip()
    outputs: list[str] = []
    if "Your output fields are:" in system:
        block = system.split("Your output fields are:", 1)[1].split("All interactions", 1)[0]
        outputs = re.findall(r"^\d+\. `(\w+)`", block, flags=re.MULTILINE)
    wants_json = "Respond with a JSON object" in user
    config = getattr(request, "config", None)
    temperature, seed = getattr(config, "temperature", None), getattr(config, "seed", None)
    return ScriptedRequest(system, user, instructions, inputs, tuple(outputs), messages, wants_json,
                           None if temperature is None else float(temperature), None if seed is None else int(seed))


def format_fields(fields: dict[str, Any], expected: tuple[str, ...] = (), as_json: bool = False) -> str:
    """Render output fields the way DSPy's ChatAdapter (or, on fallback, JSONAdapter) parses them.

    Expected fields the script did not give (e.g. ``reasoning`` of ChainOfThought) are filled with a
    short placeholder so scripts only state what they care about.
    """
    fields = {**{name: "(scripted)" for name in expected if name not in fields}, **fields}
    if as_json:
        return json.dumps({k: v if isinstance(v, (str, int, float, bool, list, dict)) else str(v) for k, v in fields.items()})
    parts = [f"[[ ## {name} ## ]]\n{value}" for name, value in fields.items()]
    return "\n\n".join(parts + ["[[ ## completed ## ]]"])


@dataclass
class ScriptedEngine:
    """A DSPy engine (``complete(Request) -> Response``) driven by a Python function.

    Thread-safe: calls are counted under a lock; the script itself must be pure or thread-safe.
    `calls` records every parsed request so tests can assert on what the LM was shown.
    """

    script: Callable[[ScriptedRequest], dict[str, Any] | str]
    model_name: str = "scripted"
    calls: list[ScriptedRequest] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def complete(self, request: Any) -> Response:
        parsed = parse_request(request)
        with self._lock:
            self.calls.append(parsed)
        answer = self.script(parsed)
        text = answer if isinstance(answer, str) else format_fields(answer, parsed.output_fields, parsed.wants_json)
        prompt_text = parsed.system + "".join(t for _, t in parsed.messages)
        usage = Usage(input_tokens=approx_tokens(prompt_text), output_tokens=approx_tokens(text))
        return Response(
            id=f"scripted-{len(self.calls)}",
            model=self.model_name,
            message=Message.assistant(text),
            finish_reason="stop",
            usage=usage,
        )

    def stream(self, request: Any):  # pragma: no cover - DSPy only streams when asked to
        raise NotImplementedError("scripted engines do not stream")

    def close(self) -> None:
        return None

    @property
    def call_count(self) -> int:
        return len(self.calls)


def scripted_lm(script: Callable[[ScriptedRequest], dict[str, Any] | str], name: str = "scripted") -> dspy.LM:
    """A `dspy.LM` backed by a `ScriptedEngine`, with DSPy's response cache disabled.

    The engine is reachable as ``lm.engine`` (DSPy's own attribute) for call counts.
    """
    engine = ScriptedEngine(script, model_name=name)
    lm = dspy.LM(f"scripted/{name}", engine=engine, cache=False, num_retries=0)
    return lm


def engine_of(lm: dspy.LM) -> ScriptedEngine:
    """The ScriptedEngine behind a scripted LM."""
    engine = getattr(lm, "_engine_spec", None)
    if not isinstance(engine, ScriptedEngine):
        raise TypeError("not a scripted LM")
    return engine
