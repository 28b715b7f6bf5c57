"""HeroRefine is an ordinary DSPy program: HERO-O can compile it (real SQLite, scripted LMs)."""

from __future__ import annotations

import re
import sqlite3

import dspy
import pytest

from dspy_hero.lm.scripted import scripted_lm
from dspy_hero.refine.module import HeroRefine
from dspy_hero.tasks.programs import SEED_INSTRUCTIONS, GenerateProgram

hero = pytest.importorskip("dspy_hero.optimizer.hero", reason="dspy_hero.optimizer.hero (HERO-O helper) missing")

RULE = "When the question asks how many, return a single COUNT(*) value instead of listing rows."
SCHEMA = "CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)"


def make_examples(tmp_path):
    out = []
    for d in range(6):
        path = tmp_path / f"db{d}.sqlite"
        con = sqlite3.connect(path)
        con.execute(SCHEMA)
        con.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)",
                        [(i, f"s{i + d}", "France", 20 + (i * 7 + d) % 40) for i in range(10 + d)])
        con.commit()
        con.close()
        for age in (25, 35, 45):
            for q, g in ((f"How many singers are older than {age}?", f"SELECT COUNT(*) FROM singer WHERE age > {age}"),
                         (f"List the names of singers older than {age}.", f"SELECT name FROM singer WHERE age > {age}")):
                out.append(dspy.Example(question=q, db_schema=SCHEMA, db_id=f"db{d}", db_path=str(path), gold_sql=g)
                           .with_inputs("question", "db_schema", "db_id", "db_path"))
    return out


def task_lm(req):
    if req.output_fields == ("sql",):
        age = re.search(r"older than (\d+)", req.inputs["question"]).group(1)
        if req.inputs["question"].startswith("How many") and "count(*)" in req.instructions.lower():
            return {"sql": f"SELECT COUNT(*) FROM singer WHERE age > {age}"}
        return {"sql": f"SELECT name FROM singer WHERE age > {age}"}
    return {"action": "stop", "argument": "the program runs cleanly"}  # the refiner


def reflect(req):
    if "evidence" in req.inputs:
        ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
        return {"preserve": "- listing queries select the asked column (P1)",
                "revise": f"- counting questions return rows instead of a count ({', '.join(ids[:4])})"}
    cite = re.search(r"\((F[^)]*)\)", req.inputs["revise"]).group(1)
    return {"edits": f"1. ADD: {RULE} ({cite})"}


def test_hero_o_compiles_a_hero_refine_program(tmp_path):
    data = make_examples(tmp_path)
    train = [e for e in data if e.db_id != "db5"]
    student = HeroRefine(GenerateProgram("sql", ["question", "db_schema"]), budget=1)
    tl = scripted_lm(task_lm)
    with dspy.context(lm=tl):
        out = hero.HeroOptimizer(reflection_lm=scripted_lm(reflect), group_key="db_id", num_rounds=1,
                                 display_progress=False).compile(student, train)
    assert isinstance(out, HeroRefine) and out is not student
    assert RULE in out.generator.generate.signature.instructions
    assert student.generator.generate.signature.instructions == SEED_INSTRUCTIONS["sql"]  # student untouched
    test = [e for e in data if e.db_id == "db5" and e.question.startswith("How many")]
    with dspy.context(lm=tl):
        preds = [out(**ex.inputs()) for ex in test]
    assert all(p.sql.startswith("SELECT COUNT(*)") for p in preds)
    assert all(p.refinement.stop_reason == "refiner stopped" for p in preds)


def test_a_counting_metric_around_a_hero_refine_student_never_sees_more_than_the_budget(tmp_path):
    """HeroRefine has several predictors: a 5-argument metric asked for per-predictor feedback runs
    once more per predictor; each of those executions is charged (it used to run 121 times for 60)."""
    from dspy_hero.bench.accounting import CountingMetric
    from dspy_hero.metrics.sql import sql_execution_metric

    data = make_examples(tmp_path)
    counted = CountingMetric(sql_execution_metric())
    student = HeroRefine(GenerateProgram("sql", ["question", "db_schema"]), budget=1)
    with dspy.context(lm=scripted_lm(task_lm)):
        out = hero.HeroOptimizer(counted, reflection_lm=scripted_lm(reflect), group_key="db_id", num_rounds=2,
                                 max_metric_calls=60, display_progress=False).compile(student, data)
    res = out.detailed_results
    assert counted.calls <= 60
    assert counted.calls == res.total_metric_calls
    assert res.feedback_metric_calls > 0  # the per-predictor feedback was asked for, and paid
