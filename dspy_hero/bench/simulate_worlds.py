"""The per-language rules of the scripted simulation: which skills a gold program needs, the rule that
teaches each skill, the tempting harmful rule, and what a wrong program looks like.

This is a simulation of *mechanics*, not of a model. A `WorldSpec` only decides, from the text of the
gold program (and, for Python, the task's tests), which instruction rules the scripted task LM needs
to "know" before it returns the gold program. Every program it returns is still executed for real
(SQLite, the embedded FalkorDB engine, the Python sandbox) and judged by the real metric, so the
optimizer and refiner see true execution evidence; the numbers only show how HERO's loop behaves on a
world whose answer is known, never how well any model writes programs.

Wrong programs come in two kinds, chosen by a hash of the instance key: one that fails to execute
(a syntax error, or a Python function that raises a NameError when called) — a HERO-T reviser can act
on that evidence — and one that runs cleanly but gives a wrong answer, which nothing observable flags.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CYPHER_WORLD",
    "PYTHON_WORLD",
    "SQL_WORLD",
    "WORLDS",
    "RuleEffect",
    "RuleEffectWorld",
    "Skill",
    "WorldSpec",
    "gold_program",
    "needs_text",
    "stable_hash",
    "world_spec",
]


def stable_hash(text: str) -> int:
    """A process-independent hash (Python's `hash` is salted per process)."""
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)


@dataclass(frozen=True)
class Skill:
    """A construct the gold program uses (`pattern`, searched in the world's needs text), the
    instruction rule that teaches it, and the `marker` the task LM looks for in its instructions."""

    name: str
    pattern: str
    rule: str
    marker: str


@dataclass(frozen=True)
class WorldSpec:
    """Everything that differs between the SQL, Cypher and Python simulations."""

    language: str
    gold_field: str  # example field holding the gold program (Python: looked up by entry point)
    program_field: str  # prediction field the task LM fills
    key_field: str  # example field that identifies an instance in a prompt
    skills: tuple[Skill, ...]
    harmful_rule: str
    harmful_marker: str
    apply_harmful: Callable[[str], str]  # gold -> what the harmful rule makes of it
    broken: Callable[[str, str], str]  # (key, gold) -> a program that fails to execute
    wrong_result: Callable[[str, str], str]  # (key, gold) -> a program that runs but answers wrongly
    is_broken: Callable[[str], bool]  # does this program carry the execution error `broken` put in?

    def skill(self, name: str) -> Skill:
        for skill in self.skills:
            if skill.name == name:
                return skill
        raise KeyError(f"no skill {name!r} in the {self.language} world; skills: {[s.name for s in self.skills]}")

    def needed(self, needs_text: str) -> set[str]:
        return {s.name for s in self.skills if re.search(s.pattern, needs_text, re.IGNORECASE | re.MULTILINE)}


# ------------------------------------------------------------------------------------------ SQL

def _sql_broken(key: str, gold: str) -> str:
    return "SELEC " + gold[len("SELECT "):] if gold.upper().startswith("SELECT ") else "SELEC 1"


def _sql_wrong(key: str, gold: str) -> str:
    return "SELECT 'no answer' WHERE 0 = 1" if stable_hash("e" + key) % 3 else "SELECT 0"


def _append_limit(gold: str) -> str:
    return gold if re.search(r"\blimit\b", gold, re.IGNORECASE) else gold + " LIMIT 1"


SQL_WORLD = WorldSpec(
    language="sql",
    gold_field="gold_sql",
    program_field="sql",
    key_field="question",
    skills=(
        Skill("count", r"\bcount\s*\(", "When the question asks how many, aggregate with COUNT.", "how many"),
        Skill("order", r"\border\s+by\b", "When the question asks for a ranking or extreme, sort with ORDER BY.", "order by"),
        Skill("group", r"\bgroup\s+by\b", "When the question asks per category, use GROUP BY on that category.", "group by"),
        Skill("join", r"\bjoin\b", "When columns come from several tables, JOIN them on their shared key.", "join them"),
        Skill("distinct", r"\bdistinct\b", "When the question asks for different values, use SELECT DISTINCT.", "select distinct"),
        Skill("nested", r"\(\s*select\b", "When a condition depends on another query, use a nested subquery.", "nested subquery"),
    ),
    harmful_rule="Always end every query with LIMIT 1 to keep the answer short.",
    harmful_marker="limit 1 to keep",
    apply_harmful=_append_limit,
    broken=_sql_broken,
    wrong_result=_sql_wrong,
    is_broken=lambda program: program.strip().upper().startswith("SELEC "),
)


# --------------------------------------------------------------------------------------- Cypher

def _cypher_broken(key: str, gold: str) -> str:
    # "MATHC" keeps the query recognisable while making it a syntax error on every engine.
    return re.sub(r"^\s*(OPTIONAL\s+)?MATCH\b", lambda m: (m.group(1) or "") + "MATHC", gold, count=1, flags=re.IGNORECASE) \
        if re.match(r"\s*(OPTIONAL\s+)?MATCH\b", gold, re.IGNORECASE) else "MATHC (n) RETURN n"


def _cypher_wrong(key: str, gold: str) -> str:
    if stable_hash("e" + key) % 3:
        return "MATCH (m:Movie) WHERE m.title = 'no such title' RETURN m.title"
    return "RETURN 0"


CYPHER_WORLD = WorldSpec(
    language="cypher",
    gold_field="gold_cypher",
    program_field="cypher",
    key_field="question",
    skills=(
        Skill("count", r"\bcount\s*\(", "When the question asks how many, aggregate with count().", "how many"),
        Skill("order", r"\border\s+by\b", "When the question asks for a ranking or extreme, sort with ORDER BY.", "order by"),
        Skill("distinct", r"\bdistinct\b", "When the question asks for different values, RETURN DISTINCT.", "return distinct"),
        Skill("optional", r"\boptional\s+match\b",
              "When entities without a match must still appear, use OPTIONAL MATCH.", "optional match"),
        Skill("aggregate", r"\bwith\b|\b(avg|sum|min|max|collect)\s*\(",
              "When the question filters or ranks on a per-entity total or average, aggregate and carry it on with WITH.",
              "carry it on with with"),
        Skill("varlength", r"\[[^\]]*\*[^\]]*\]",
              "When entities are linked through intermediate nodes, use a variable-length path such as -[*1..2]-.",
              "variable-length path"),
    ),
    harmful_rule="Always end every query with LIMIT 1 to keep the answer short.",
    harmful_marker="limit 1 to keep",
    apply_harmful=_append_limit,
    broken=_cypher_broken,
    wrong_result=_cypher_wrong,
    is_broken=lambda program: bool(re.match(r"\s*(OPTIONAL\s+)?MATHC\b", program, re.IGNORECASE)),
)


# --------------------------------------------------------------------------------------- Python

_PY_BROKEN_HELPER = "_prepare_arguments"


def _py_def(gold: str, key: str) -> re.Match[str] | None:
    return re.search(rf"^def\s+{re.escape(key)}\s*\((.*?)\)[^\n]*:\s*\n", gold, re.MULTILINE | re.DOTALL)


def _py_broken(key: str, gold: str) -> str:
    """The reference with a call to a helper that was never written: it loads, then raises NameError
    on the first call, so the visible examples show the error."""
    match = _py_def(gold, key)
    if match is None:
        return f"def {key}(*args, **kwargs):\n    return {_PY_BROKEN_HELPER}(*args, **kwargs)\n"
    body_indent = re.match(r"[ \t]*", gold[match.end():]).group(0) or "    "
    return gold[: match.end()] + f"{body_indent}{_PY_BROKEN_HELPER}(locals())\n" + gold[match.end():]


def _py_wrong(key: str, gold: str) -> str:
    """The reference under another name, and an entry point that nudges its result (off by one, a
    flipped bool, a dropped item): it runs cleanly on every input and fails the tests' value checks."""
    renamed = re.sub(rf"\bdef\s+{re.escape(key)}\s*\(", f"def _draft_{key}(", gold, count=1)
    return renamed + (
        f"\n\ndef {key}(*args, **kwargs):\n"
        f"    result = _draft_{key}(*args, **kwargs)\n"
        "    if isinstance(result, bool):\n"
        "        return not result\n"
        "    if isinstance(result, (int, float)):\n"
        "        return result + 1\n"
        "    if isinstance(result, str):\n"
        "        return result + '?'\n"
        "    if isinstance(result, (list, tuple)):\n"
        "        return type(result)(list(result)[1:]) if result else type(result)([None])\n"
        "    if isinstance(result, dict):\n"
        "        return {**result, '?': None}\n"
        "    return None\n"
    )


def _py_no_raise(gold: str) -> str:
    """What "never raise" does to a program: every raise statement becomes `return None`."""
    return re.sub(r"^(\s*)raise\b[^\n]*", r"\1return None", gold, flags=re.MULTILINE)


PYTHON_WORLD = WorldSpec(
    language="python",
    gold_field="code",  # Python gold programs come from `python_reference`, keyed by entry point
    program_field="code",
    key_field="entry_point",
    skills=(
        Skill("sorting", r"\bsorted\s*\(|\.sort\s*\(",
              "When the output has an order, sort explicitly with sorted() and a key.", "sort explicitly"),
        Skill("strings", r"\bre\.|\.(split|join|lower|upper|strip|replace|startswith|endswith)\s*\(",
              "When parsing or building text, use str methods or re and normalise case and whitespace.", "normalise case"),
        Skill("dates", r"\b(datetime|date|timedelta|calendar)\b",
              "When the task involves dates, use the datetime module (date.fromisoformat, timedelta).", "datetime module"),
        Skill("aggregation", r"\bCounter\b|\bdefaultdict\b|\.get\([^)]*,\s*0\)|\.setdefault\(",
              "When counting or totalling per key, accumulate in a dict with .get(key, 0) or Counter.", "accumulate in a dict"),
        Skill("validation", r"^\s*raise\s+\w*Error",
              "When the task says an input is invalid, raise the exception it names instead of returning a value.",
              "raise the exception it names"),
        Skill("empty", r"def test_empty|\(\s*\[\]\s*\)|\(\s*\"\"\s*\)",
              "Handle empty input explicitly and return the empty result the task describes.", "handle empty input"),
    ),
    harmful_rule="Never raise exceptions: return None for invalid input so callers never crash.",
    harmful_marker="never raise exceptions",
    apply_harmful=_py_no_raise,
    broken=_py_broken,
    wrong_result=_py_wrong,
    is_broken=lambda program: f"{_PY_BROKEN_HELPER}(" in program,
)

WORLDS: dict[str, WorldSpec] = {w.language: w for w in (SQL_WORLD, CYPHER_WORLD, PYTHON_WORLD)}


def world_spec(language: str) -> WorldSpec:
    try:
        return WORLDS[language]
    except KeyError:
        raise ValueError(f"no simulation for language {language!r}; choose one of {sorted(WORLDS)}") from None


def needs_text(spec: WorldSpec, example: Any) -> str:
    """The text whose constructs decide the skills an instance needs: the gold program, plus the
    task's tests for Python (edge cases such as empty input show up there, not in the solution)."""
    if spec.language == "python":
        from dspy_hero.tasks.builtin.python_reference import reference_solution

        return reference_solution(example["entry_point"]) + "\n" + (example.get("test_code") or "")
    return example[spec.gold_field]


def gold_program(spec: WorldSpec, example: Any) -> str:
    if spec.language == "python":
        from dspy_hero.tasks.builtin.python_reference import reference_solution

        return reference_solution(example["entry_point"])
    return example[spec.gold_field]


# ------------------------------------------------------------------------- rule-effect worlds

@dataclass(frozen=True)
class RuleEffect:
    """A rule and what it does, in pairs against the seed: it turns a wrong answer right with
    probability ``2 * fixes`` and a right answer wrong with probability ``2 * breaks`` (per instance,
    by a hash), so on a seed that is right half the time its paired fix rate is ``fixes``, its
    break rate ``breaks`` and its true effect ``fixes - breaks`` accuracy points."""

    rule: str
    fixes: float
    breaks: float

    @property
    def effect(self) -> float:
        return self.fixes - self.breaks


@dataclass
class RuleEffectWorld:
    """A world for the acceptance benchmark, where the answer to "is this rule better?" is known.

    Instance `i` is answered right by the seed when a hash says so (half of them); each rule the
    instructions contain is applied in order (see RuleEffect). The reflector side is a proposal
    schedule: `proposals(k)` are the rules offered on the k-th proposal call, a fresh noise rule
    (no net effect) for every slot the schedule leaves open, so no two calls repeat themselves.
    A simulation of mechanics, not of a model (see the module docstring of simulate.py).
    """

    salt: str
    known: tuple[RuleEffect, ...] = ()
    noise_rate: float = 0.1
    per_call: int = 4

    def base_right(self, key: str) -> bool:
        return stable_hash(f"{self.salt}:base:{key}") % 1000 < 500

    def noise(self, n: int) -> RuleEffect:
        return RuleEffect(f"When a question mentions topic {n}, state the answer in style {n}.", self.noise_rate,
                          self.noise_rate)

    def effect_of(self, rule: str) -> RuleEffect | None:
        for r in self.known:
            if r.rule == rule:
                return r
        m = re.match(r"When a question mentions topic (\d+), state the answer in style \1\.$", rule)
        return self.noise(int(m.group(1))) if m else None

    def right(self, key: str, instructions: str) -> bool:
        ok = self.base_right(key)
        for line in instructions.splitlines():
            effect = self.effect_of(line[2:].strip()) if line.startswith("- ") else None
            if effect is None:
                continue
            u = (stable_hash(f"{self.salt}:{effect.rule}:{key}") % 10_000) / 10_000
            if not ok and u < 2 * effect.fixes:
                ok = True
            elif ok and u < 2 * effect.breaks:
                ok = False
        return ok

    def proposals(self, k: int, present: str) -> list[str]:
        """The rules offered on the k-th proposal call: the known rules not yet in the prompt first
        (rotated by k), then fresh noise rules to fill `per_call` slots."""
        known = [r.rule for r in self.known if r.rule not in present]
        if known:
            s = k % len(known)
            known = known[s:] + known[:s]
        fill = [self.noise(k * self.per_call + j).rule for j in range(self.per_call)]
        return (known + fill)[: self.per_call]
