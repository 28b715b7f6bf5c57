"""HERO-O end to end on real SQLite databases with real execution (dspy_hero.metrics.sql), the metric
inferred from the examples, the default budget (auto="light") and pools grouped by database."""

from __future__ import annotations

import hashlib
import re
import sqlite3

import dspy

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.metrics.sql import sql_execution_metric
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.tasks.programs import SEED_INSTRUCTIONS, GenerateProgram

RULE = "When the question asks how many, return a single COUNT(*) value instead of listing rows."


def make_db(path, n_rows: int, offset: int) -> None:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)")
    countries = ["France", "Peru", "Japan", "Kenya"]
    con.executemany("INSERT INTO singer VALUES (?, ?, ?, ?)",
                    [(i, f"s{i + offset}", countries[(i + offset) % 4], 20 + (i * 7 + offset) % 40) for i in range(n_rows)])
    con.commit()
    con.close()


def examples(tmp_path):
    out = []
    schema = "CREATE TABLE singer (id INTEGER PRIMARY KEY, name TEXT, country TEXT, age INTEGER)"
    for d in range(8):
        path = tmp_path / f"db{d}.sqlite"
        make_db(path, 12 + d, d)
        for age in (25, 30, 35, 40, 45):
            for kind in ("count", "list"):
                if kind == "count":
                    q, g = f"How many singers are older than {age}?", f"SELECT COUNT(*) FROM singer WHERE age > {age}"
                else:
                    q, g = f"List the names of singers older than {age}.", f"SELECT name FROM singer WHERE age > {age}"
                out.append(dspy.Example(question=q, db_schema=schema, db_id=f"db{d}", db_path=str(path), gold_sql=g)
                           .with_inputs("question", "db_schema", "db_id", "db_path"))
    return out


def task(req):
    """Lists rows for a counting question unless the instructions teach counting."""
    age = re.search(r"older than (\d+)", req.inputs["question"]).group(1)
    if req.inputs["question"].startswith("How many") and "count(*)" in req.instructions.lower():
        return {"sql": f"```sql\nSELECT COUNT(*) FROM singer WHERE age > {age}\n```"}
    return {"sql": f"```sql\nSELECT name FROM singer WHERE age > {age}\n```"}


def reflect(req):
    if "evidence" in req.inputs:
        ids = re.findall(r"### Case (F\d+)", req.inputs["evidence"])
        return {"preserve": "- listing queries select the asked column (P1)",
                "revise": f"- counting questions return rows instead of a count ({', '.join(ids[:4])})"}
    cite = re.search(r"\((F[^)]*)\)", req.inputs["revise"]).group(1)
    return {"edits": f"1. ADD: {RULE} ({cite})\n2. ADD: Order rows by name when listing them. ({cite})"}


def digest(path) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def accuracy(prog, data, lm):
    metric = sql_execution_metric()
    with dspy.context(lm=lm):
        return sum(metric(ex, prog(**ex.inputs())).score for ex in data) / len(data)


def test_hero_o_on_real_sqlite(tmp_path):
    data = examples(tmp_path)
    train, test = [e for e in data if e.db_id != "db7"], [e for e in data if e.db_id == "db7"]
    before = {p: digest(p) for p in {e.db_path for e in data}}
    tl, rl = scripted_lm(task), scripted_lm(reflect)
    student = GenerateProgram("sql", ["question", "db_schema"])
    with dspy.context(lm=tl):
        out = HeroOptimizer(reflection_lm=rl, group_key="db_id", num_rounds=2, display_progress=False).compile(student, train)
    res = out.detailed_results
    instr = out.generate.signature.instructions
    assert instr.startswith(SEED_INSTRUCTIONS["sql"]) and RULE in instr
    assert res.total_metric_calls <= res.budget and engine_of(tl).call_count == res.total_metric_calls - res.preflight_metric_calls
    first = next(c for c in res.rounds[0].candidates if RULE in c.instructions)
    assert first.decision.accepted and first.decision.breaks == 0
    assert accuracy(out, test, tl) == 1.0 > accuracy(student, test, tl) == 0.5
    # grouped pools: no database spans two pools
    dbs = {f"t{i}": e.db_id for i, e in enumerate(train)}
    pools = [{dbs[i] for i in res.pools[k]} for k in ("diagnosis", "update", "selection")]
    assert all(pools) and not res.pools["selection_reuses_update"]
    assert not (pools[0] & pools[1]) and not (pools[1] & pools[2]) and not (pools[0] & pools[2])
    assert before == {p: digest(p) for p in before}


def test_the_loop_shows_the_reflector_programmatic_diagnoses(tmp_path):
    """The run wires its Diagnoser into the evidence: every failing case shown carries a
    'Diagnosis:' line and the counted patterns open the evidence (breaking the wiring fails this)."""
    data = [e for e in examples(tmp_path) if e.db_id != "db7"]
    seen: list[str] = []

    def recording(req):
        if "evidence" in req.inputs:
            seen.append(req.inputs["evidence"])
        return reflect(req)

    tl, rl = scripted_lm(task), scripted_lm(recording)
    with dspy.context(lm=tl):
        HeroOptimizer(reflection_lm=rl, group_key="db_id", num_rounds=1, display_progress=False).compile(
            GenerateProgram("sql", ["question", "db_schema"]), data)
    assert seen, "the reflector never saw evidence"
    evidence = seen[0]
    assert evidence.startswith("## Failure patterns found by program analysis")
    failing = re.findall(r"### Case F\d+.*?(?=### Case |\Z)", evidence, re.DOTALL)
    assert failing and all("Diagnosis: " in block for block in failing)
    assert "db_path" not in evidence  # environment references are never shown as inputs
