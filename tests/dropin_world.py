"""A small real-SQLite world for the drop-in tests (issue 13) and benchmarks/dropin_check.py: examples
that mark only ``question`` and ``db_schema`` as inputs (db_path, db_id and gold_sql are not), a scripted
task LM that answers in whatever output field the program declares (``sql``, ``query``; ``plan`` for a
planning step) and counts only when its instructions teach COUNT(*), and a scripted reflector that
proposes that rule. Not a test module itself."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import dspy

from dspy_hero.lm.scripted import ScriptedRequest, scripted_lm

RULE = "When the question asks how many, return a single COUNT(*) value instead of listing rows."
SCHEMA = "CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, age INTEGER)"
PROGRAM_FIELDS = ("sql", "query")


def make_db(path: Path, n_rows: int, offset: int) -> None:
    con = sqlite3.connect(path)
    con.execute(SCHEMA)
    con.executemany("INSERT INTO singer VALUES (?, ?, ?)",
                    [(i, f"s{i + offset}", 20 + (i * 7 + offset) % 40) for i in range(n_rows)])
    con.commit()
    con.close()


def examples(directory: Path, n_dbs: int = 6, gold_sql=None) -> list[dspy.Example]:
    """Counting and listing questions over `n_dbs` databases; only question and db_schema are inputs.
    `gold_sql(kind, age)` overrides the reference (e.g. a broken one)."""
    out = []
    for d in range(n_dbs):
        path = Path(directory) / f"db{d}.sqlite"
        if not path.exists():
            make_db(path, 12 + d, d)
        for age in (25, 30, 35, 40, 45):
            for kind in ("count", "list"):
                if kind == "count":
                    q, g = f"How many singers are older than {age}?", f"SELECT COUNT(*) FROM singer WHERE age > {age}"
                else:
                    q, g = f"List the names of singers older than {age}.", f"SELECT name FROM singer WHERE age > {age}"
                if gold_sql is not None:
                    g = gold_sql(kind, age)
                out.append(dspy.Example(question=q, db_schema=SCHEMA, db_id=f"db{d}", db_path=str(path), gold_sql=g)
                           .with_inputs("question", "db_schema"))
    return out


def answer(question: str, instructions: str) -> str:
    age = re.search(r"older than (\d+)", question).group(1)
    if question.startswith("How many") and "count(*)" in instructions.lower():
        return f"SELECT COUNT(*) FROM singer WHERE age > {age}"
    return f"SELECT name FROM singer WHERE age > {age}"


def task_lm(seen: list | None = None) -> dspy.LM:
    """Answers in the program field the request asks for; records each request's input names in `seen`."""

    def script(req: ScriptedRequest):
        if seen is not None:
            seen.append(tuple(sorted(req.inputs)))
        question = req.inputs.get("question") or req.inputs.get("q") or ""
        if "plan" in req.output_fields:
            return {"plan": "select from singer, filter on age"}
        field = next((f for f in req.output_fields if f in PROGRAM_FIELDS), req.output_fields[-1])
        return {field: answer(question, req.instructions)}

    return scripted_lm(script, name="dropin-task")


def reflection_lm() -> dspy.LM:
    def script(req: ScriptedRequest):
        if "evidence" in req.inputs:
            ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
            return {"preserve": "- listing queries select the asked column (P1)",
                    "revise": f"- counting questions return rows instead of a count ({', '.join(ids[:4]) or 'F1'})"}
        cite = (re.search(r"\((F[^)]*)\)", req.inputs.get("revise", "")) or re.search("(F1)", "F1")).group(1)
        return {"edits": f"1. ADD: {RULE} ({cite})"}

    return scripted_lm(script, name="dropin-reflect")


class PlanThenWrite(dspy.Module):
    """Two predictors and a custom forward(question, db_schema)."""

    def __init__(self):
        super().__init__()
        self.plan = dspy.Predict("question -> plan")
        self.write = dspy.Predict("question, db_schema, plan -> sql")

    def forward(self, question, db_schema):
        plan = self.plan(question=question).plan
        return self.write(question=question, db_schema=db_schema, plan=plan)


class RenamedQuery(dspy.Module):
    """A custom forward whose predictor uses other names and whose output is `query`, not `sql`."""

    def __init__(self):
        super().__init__()
        self.gen = dspy.Predict("question, schema -> query")

    def forward(self, question, db_schema):
        return dspy.Prediction(query=self.gen(question=question, schema=db_schema).query)


class NeedsHint(dspy.Module):
    """A forward requiring an input the examples do not have."""

    def __init__(self):
        super().__init__()
        self.gen = dspy.Predict("question, db_schema, hint -> sql")

    def forward(self, question, db_schema, hint):
        return self.gen(question=question, db_schema=db_schema, hint=hint)


class Raises(dspy.Module):
    """A program that raises on every call (a bug), after its inputs were accepted."""

    def __init__(self):
        super().__init__()
        self.gen = dspy.Predict("question, db_schema -> sql")

    def forward(self, question, db_schema):
        raise RuntimeError("bug in forward")
