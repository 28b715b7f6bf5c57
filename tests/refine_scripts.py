"""Scripted LMs for the HeroRefine tests: answers are routed by which output fields a call asks for."""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm

ROLES = {
    ("sql",): "generator",
    ("cypher",): "generator",
    ("code",): "generator",
    ("action", "argument"): "refiner",
    ("chosen",): "selector",
    ("reason", "revised_program"): "reviser",
    ("reason", "supported"): "judge",
}

Answer = dict[str, Any] | str | Callable[[ScriptedRequest], Any] | BaseException


class RoleScript:
    """Per-role answer queues; `seen[role]` records every request that role received.

    A queue's last answer repeats once the queue is used up, so "always diagnose" is one entry.
    An answer may be a dict of fields, raw text (malformed output), a function of the request, or an
    exception instance to raise (a failing LM).
    """

    def __init__(self, **answers: list[Answer] | Answer):
        self.answers = {role: list(a) if isinstance(a, list) else [a] for role, a in answers.items()}
        self.seen: dict[str, list[ScriptedRequest]] = defaultdict(list)
        self._lock = threading.Lock()

    def __call__(self, req: ScriptedRequest):
        role = ROLES.get(tuple(req.output_fields), "unknown")
        with self._lock:
            self.seen[role].append(req)
            queue = self.answers.get(role)
            if not queue:
                raise AssertionError(f"no scripted answer for role {role!r} (fields {req.output_fields})")
            answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, BaseException):
            raise answer
        if callable(answer):
            return answer(req)
        return answer

    def count(self, role: str) -> int:
        return len(self.seen.get(role, []))

    def lm(self):
        return scripted_lm(self)
