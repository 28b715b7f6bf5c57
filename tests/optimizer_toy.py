"""A toy text-to-SQL task whose scripted task LM answers correctly only when the instructions carry
the right rule, and a scripted reflection LM that proposes chosen rules: the optimizer's mechanics
can then be checked exactly. Shared by tests/test_optimizer_*.py (not a test module itself)."""

from __future__ import annotations

import re
from collections.abc import Callable

import dspy

from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm
from dspy_hero.tasks.programs import GenerateProgram

KINDS = ("count", "sum", "plain")


def make_examples(n: int, kinds=KINDS, start: int = 0, groups: int | None = None) -> list[dspy.Example]:
    out = []
    for i in range(start, start + n):
        kind = kinds[i % len(kinds)]
        table = f"tbl{i}"
        if kind == "count":
            q, gold = f"How many rows are in table {table}?", f"SELECT COUNT(*) FROM {table}"
        elif kind == "sum":
            q, gold = f"What is the total amount in table {table}?", f"SELECT SUM(amount) FROM {table}"
        else:
            q, gold = f"List all rows of table {table}.", f"SELECT * FROM {table}"
        fields = dict(question=q, gold_sql=gold, kind=kind)
        if groups:
            fields["db_id"] = f"db{i % groups}"
            out.append(dspy.Example(**fields).with_inputs("question", "db_id"))
        else:
            out.append(dspy.Example(**fields).with_inputs("question"))
    return out


def answer_for(question: str, instructions: str) -> str:
    """The toy task LM's policy: counting needs a rule mentioning COUNT, totals one mentioning SUM;
    a rule mentioning LIMIT breaks listing questions."""
    table = re.search(r"table (\w+)", question).group(1)
    low = instructions.lower()
    if question.startswith("How many"):
        return f"SELECT COUNT(*) FROM {table}" if "count" in low else f"SELECT * FROM {table}"
    if question.startswith("What is the total"):
        return f"SELECT SUM(amount) FROM {table}" if "sum(" in low else f"SELECT amount FROM {table}"
    return f"SELECT * FROM {table} LIMIT 1" if "limit" in low else f"SELECT * FROM {table}"


def task_lm(fail: Callable[[ScriptedRequest], str | None] | None = None) -> dspy.LM:
    def script(req: ScriptedRequest):
        if fail is not None:
            bad = fail(req)
            if bad is not None:
                return bad
        return {"sql": answer_for(req.inputs.get("question", ""), req.instructions)}

    return scripted_lm(script, name="toy-task")


def norm(sql: str) -> str:
    return " ".join(str(sql).lower().split())


def feedback_metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    """GEPA-style 5-argument metric with feedback."""
    ok = norm(getattr(pred, "sql", "")) == norm(gold.gold_sql)
    fb = "The result matches." if ok else "The result differs from the expected result."
    return dspy.Prediction(score=float(ok), feedback=fb)


def float_metric(gold, pred):
    return float(norm(getattr(pred, "sql", "")) == norm(gold.gold_sql))


def reflection_lm(rounds: list[list[str]] | Callable[[int], list[str]], garbage: str | None = None) -> dspy.LM:
    """A reflection LM whose k-th edits call proposes `rounds[k]` (rules are cited with every failing
    case id in the evidence). `garbage` makes every answer that raw text instead."""
    state = {"edits_calls": 0, "failing": []}

    def script(req: ScriptedRequest):
        if garbage is not None:
            return garbage
        if "evidence" in req.inputs:
            ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            state["failing"] = ids
            return {"preserve": "- listing questions select all rows (P1)",
                    "revise": f"- counting and totals are answered wrongly ({', '.join(ids)})"}
        k = state["edits_calls"]
        state["edits_calls"] += 1
        rules = rounds(k) if callable(rounds) else (rounds[k] if k < len(rounds) else [])
        cite = ", ".join(state["failing"][:3])
        return {"edits": "\n".join(f"{i}. ADD: {r} ({cite})" for i, r in enumerate(rules, 1))}

    return scripted_lm(script, name="toy-reflect")


def program() -> GenerateProgram:
    return GenerateProgram("sql", ["question"])


COUNT_RULE = "Use COUNT(*) whenever the question asks how many rows there are."
SUM_RULE = "Use SUM(column) whenever the question asks for a total amount."
LIMIT_RULE = "Always add LIMIT 1 and use COUNT(*) to keep results small."
NOOP_RULE = "Write clear and readable SQL with consistent keyword casing."


def kind_reflection_lm() -> dspy.LM:
    """A reflection LM that is a pure function of its request (needed where runs resume in a new
    process): it names the failing kinds in the gradient and proposes rules for the first one."""

    def script(req: ScriptedRequest):
        if "evidence" in req.inputs:
            ev = req.inputs["evidence"]
            blocks = re.findall(r"### Case (F\d+) [^\n]*\nInputs:\n  question: ([^\n]*)", ev)
            count = [c for c, q in blocks if q.startswith("How many")]
            total = [c for c, q in blocks if q.startswith("What is the total")]
            lines = []
            if count:
                lines.append(f"- counting questions are answered without COUNT ({', '.join(count[:3])})")
            if total:
                lines.append(f"- totals are answered without SUM ({', '.join(total[:3])})")
            return {"preserve": "- listing questions select all rows (P1)", "revise": "\n".join(lines) or "- none"}
        revise = req.inputs.get("revise", "")
        cites = re.findall(r"\((F[\d, F]+)\)", revise)
        if "COUNT" in revise and "count" not in req.inputs.get("current_rules", "").lower():
            c = cites[0]
            return {"edits": f"1. ADD: {NOOP_RULE} ({c})\n2. ADD: {LIMIT_RULE} ({c})\n3. ADD: {COUNT_RULE} ({c})"}
        if "SUM" in revise:
            c = cites[-1]
            return {"edits": f"- ADD: {NOOP_RULE} ({c})\n- ADD: {SUM_RULE} ({c})"}
        return {"edits": "(nothing to change)"}

    return scripted_lm(script, name="toy-reflect-pure")
