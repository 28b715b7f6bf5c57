"""Turning the refiner's free-text choice into an action, and the non-LM parts of carrying it out.

Small models answer loosely ("Probe: schema", "run_subquery(SELECT ...)", "done"), so parsing is
tolerant; anything it cannot map to an available action becomes an `invalid` action that still uses
budget, so a confused refiner cannot loop for free.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from dspy_hero.refine.demos import Demo, DemoBank
from dspy_hero.refine.trace import DIAGNOSE, INVALID, PROBE, RETRIEVE, REVISE, STOP

_SYNONYMS = {
    DIAGNOSE: DIAGNOSE, "diagnosis": DIAGNOSE, "analyze": DIAGNOSE, "analyse": DIAGNOSE, "think": DIAGNOSE,
    PROBE: PROBE, "inspect": PROBE, "explore": PROBE,
    RETRIEVE: RETRIEVE, "retrieval": RETRIEVE, "search": RETRIEVE, "examples": RETRIEVE,
    REVISE: REVISE, "revision": REVISE, "rewrite": REVISE, "fix": REVISE, "repair": REVISE, "edit": REVISE,
    STOP: STOP, "done": STOP, "finish": STOP, "accept": STOP, "none": STOP, "end": STOP,
}


@dataclass(frozen=True)
class Action:
    """A parsed refiner decision. For probes, `probe` and `probe_argument` are set; for invalid
    actions, `problem` says what was wrong."""

    kind: str
    argument: str = ""
    probe: str = ""
    probe_argument: str = ""
    problem: str = ""


def parse_action(action: object, argument: object, probe_names: list[str]) -> Action:
    """Map the refiner's (action, argument) text to an `Action`; never raises."""
    # A model that copies a menu line ("probe schema — tables, columns ...") keeps only its head.
    text = re.split(r"\s+[—–]\s+|\s+-\s+", str(action or "").strip(), maxsplit=1)[0].strip()
    arg = str(argument or "").strip()
    words = re.split(r"[\s:(]+", text.strip("`'\"*[]. ").lower(), maxsplit=1)
    head = words[0] if words else ""
    tail = text.strip("`'\"*[]. ")[len(head):].strip(" :()") if head else ""
    lowered = {p.lower(): p for p in probe_names}
    if head in lowered:  # "schema" given as the action: a probe named directly
        return _probe(lowered[head], " ".join(x for x in (tail, arg) if x), arg or tail)
    kind = _SYNONYMS.get(head)
    if kind is None:
        return Action(INVALID, text[:200], problem=f"unknown action {text[:80]!r}")
    if kind == PROBE:
        spec = " ".join(x for x in (tail, arg) if x) if tail else arg
        return _parse_probe(spec, lowered)
    return Action(kind, arg or tail)


def _parse_probe(spec: str, lowered: dict[str, str]) -> Action:
    spec = spec.strip().strip("`")
    match = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:[:(=]\s*|\s+|$)(.*)", spec, re.DOTALL)
    if not match or match.group(1).lower() not in lowered:
        name = match.group(1) if match else spec[:40]
        return Action(INVALID, spec[:200], problem=f"unknown probe {name!r}; available: {sorted(lowered.values())}")
    rest = match.group(2).strip()
    if spec[match.end(1):].lstrip().startswith("(") and rest.endswith(")"):
        rest = rest[:-1].strip()
    return _probe(lowered[match.group(1).lower()], spec, rest.strip("'\"` "))


def _probe(name: str, argument: str, probe_argument: str) -> Action:
    return Action(PROBE, argument, probe=name, probe_argument=probe_argument)


def render_actions(probes: dict[str, str], can_retrieve: bool, left: int) -> str:
    """The menu shown to the refiner: each action and what its argument is, and the budget left.

    Arguments are described, not shown as placeholders: small models copy placeholders verbatim.
    """
    head = f"{left} action(s) left. Put one action (the words before the dash) in `action` and its argument in `argument`."
    lines = [head]
    for name, desc in probes.items():
        lines.append(f"- probe {name} — argument: {desc}")
    if can_retrieve:
        lines.append("- retrieve — argument: keywords for similar verified tasks, or nothing")
    lines += [
        "- diagnose — argument: what the evidence shows is wrong, in your own words",
        "- revise — argument: the change the evidence calls for",
        "- stop — argument: nothing",
    ]
    return "\n".join(lines)


SelectFn = Callable[[str, str], str]  # (task, numbered candidates) -> chosen numbers text


def choose_demos(
    bank: DemoBank, query: str, task_text: str, k: int, max_demos: int, select: SelectFn, group: str | None = None
) -> tuple[list[Demo], str]:
    """Retrieve `k` demos by BM25, let `select` (the LM) pick some, and keep at most `max_demos`.

    The selector sees only the candidates' task texts, never their programs, so no more than
    `max_demos` verified programs ever reach the refiner or reviser. When BM25 finds no more than
    `max_demos`, they are all kept and no LM call is made. Returns (demos, a note for the trace).
    """
    found = bank.retrieve(query, k=k, task_text=task_text, group=group)
    if not found:
        return [], "no verified example shares terms with this task"
    if len(found) <= max_demos:
        return [d for d, _ in found], f"retrieved {len(found)} example(s); all kept"
    listing = "\n".join(f"{i + 1}. {_short(d.text)}" for i, (d, _) in enumerate(found))
    answer = select(task_text, listing)
    numbers = [int(n) for n in re.findall(r"\d+", answer or "")]
    chosen: list[int] = []
    for n in numbers:
        if 1 <= n <= len(found) and n - 1 not in chosen:
            chosen.append(n - 1)
    if not numbers and not re.fullmatch(r"\s*(none|no|nothing|-|\[\])?\s*\.?", (answer or "").lower()):
        chosen = list(range(max_demos))  # unreadable choice: fall back to the BM25 ranking
        note = f"retrieved {len(found)}; selector answer unreadable, kept the top {max_demos} by BM25"
    else:
        note = f"retrieved {len(found)}; selector chose {[c + 1 for c in chosen[:max_demos]]}"
    return [found[i][0] for i in chosen[:max_demos]], note


def _short(text: str, limit: int = 300) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 3] + "..."
