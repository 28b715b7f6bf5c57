"""HERO-O's own overhead per rollout vs dspy.GEPA's, with a zero-latency scripted LM and a cheap metric.

Both optimizers run the same seed program on the same data with the same metric-call budget; the LM
and the metric answer instantly, so wall time per metric call is the optimizer's own cost (plus
DSPy's adapter formatting/parsing, which both share). Prints the figures and optionally writes JSON.

    python benchmarks/overhead.py --budget 600 --train 60 --val 30 --json overhead.json
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import time

import dspy

from dspy_hero.lm.scripted import engine_of, scripted_lm
from dspy_hero.optimizer.hero import HeroOptimizer
from dspy_hero.tasks.programs import GenerateProgram

KINDS = {  # question template, gold template, the word a rule must contain for a correct answer
    "count": ("How many rows are in table {t}?", "SELECT COUNT(*) FROM {t}", "count"),
    "sum": ("What is the total amount in table {t}?", "SELECT SUM(amount) FROM {t}", "sum("),
    "avg": ("What is the average amount in table {t}?", "SELECT AVG(amount) FROM {t}", "avg("),
    "plain": ("List all rows of table {t}.", "SELECT * FROM {t}", None),
}
RULES = {
    "count": "Use COUNT(*) whenever the question asks how many rows there are.",
    "sum": "Use SUM(column) whenever the question asks for a total amount.",
    "avg": "Use AVG(column) whenever the question asks for an average amount.",
}


def make_examples(n: int, start: int = 0) -> list[dspy.Example]:
    kinds = list(KINDS)
    out = []
    for i in range(start, start + n):
        q, g, _ = KINDS[kinds[i % len(kinds)]]
        out.append(dspy.Example(question=q.format(t=f"tbl{i}"), gold_sql=g.format(t=f"tbl{i}")).with_inputs("question"))
    return out


def task_script(req):
    """Correct only when the instructions carry the rule for the question's kind."""
    question = req.inputs["question"]
    table = re.search(r"table (\w+)", question).group(1)
    for q, g, word in KINDS.values():
        if question == q.format(t=table):
            ok = word is None or word in req.instructions.lower()
            return {"sql": g.format(t=table) if ok else f"SELECT amount FROM {table}"}
    return {"sql": f"SELECT * FROM {table}"}


def _kind(question: str) -> str:
    return next(k for k, (q, _, _) in KINDS.items() if question.startswith(q.split("{")[0][:18]))


def reflection_script(req):
    """Answers any reflection request (GEPA's or HERO's) instantly with rules for the failing kinds."""
    if "evidence" in req.inputs:
        found = re.findall(r"### Case (F\d+) [^\n]*\nInputs:\n  question: ([^\n]*)", req.inputs["evidence"])
        lines = [f"- {_kind(q)} questions fail ({cid})" for cid, q in found[:8]]
        return {"preserve": "- listing works (P1)", "revise": "\n".join(lines) or "- none"}
    if "edits" in req.output_fields:
        pairs = re.findall(r"- (\w+) questions fail \((F\d+)\)", req.inputs.get("revise", ""))
        edits, seen = [], set()
        for kind, cid in pairs:
            if kind in RULES and kind not in seen and RULES[kind] not in req.inputs.get("current_rules", ""):
                seen.add(kind)
                edits.append(f"{len(edits) + 1}. ADD: {RULES[kind]} ({cid})")
        return {"edits": "\n".join(edits) or "(none)"}
    base = "Write one SQLite query that answers the question. Return only the SQL query."
    return {name: f"{base} {' '.join(RULES.values())}" for name in req.output_fields}


def metric(gold, pred, trace=None, pred_name=None, pred_trace=None):
    ok = " ".join(str(getattr(pred, "sql", "")).split()).lower() == gold.gold_sql.lower()
    return dspy.Prediction(score=float(ok), feedback="correct" if ok else "wrong result")


def run_hero(train, val, budget, threads):
    tl, rl = scripted_lm(task_script, "task"), scripted_lm(reflection_script, "reflect")
    t0 = time.perf_counter()
    with dspy.context(lm=tl):
        out = HeroOptimizer(metric, reflection_lm=rl, max_metric_calls=budget, num_threads=threads).compile(
            GenerateProgram("sql", ["question"]), train, valset=val)
    wall = time.perf_counter() - t0
    calls = out.detailed_results.total_metric_calls
    return {"wall_s": wall, "metric_calls": calls, "task_lm_calls": engine_of(tl).call_count,
            "reflection_lm_calls": engine_of(rl).call_count, "per_rollout_ms": 1000 * wall / max(calls, 1)}


def run_gepa(train, val, budget, threads):
    tl, rl = scripted_lm(task_script, "task"), scripted_lm(reflection_script, "reflect")
    t0 = time.perf_counter()
    with dspy.context(lm=tl):
        out = dspy.GEPA(metric, reflection_lm=rl, max_metric_calls=budget, num_threads=threads, track_stats=True).compile(
            GenerateProgram("sql", ["question"]), trainset=train, valset=val)
    wall = time.perf_counter() - t0
    calls = out.detailed_results.total_metric_calls or engine_of(tl).call_count
    return {"wall_s": wall, "metric_calls": calls, "task_lm_calls": engine_of(tl).call_count,
            "reflection_lm_calls": engine_of(rl).call_count, "per_rollout_ms": 1000 * wall / max(calls, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=600)
    ap.add_argument("--train", type=int, default=60)
    ap.add_argument("--val", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    train, val = make_examples(args.train), make_examples(args.val, start=10_000)
    # warm both paths first so lazy imports and first-call setup are not billed to either
    run_gepa(train[:8], val[:4], 20, args.threads)
    run_hero(train[:8], val[:4], 20, args.threads)
    gepa = run_gepa(train, val, args.budget, args.threads)
    hero = run_hero(train, val, args.budget, args.threads)
    ratio = hero["per_rollout_ms"] / gepa["per_rollout_ms"]
    figures = {"budget": args.budget, "train": args.train, "val": args.val, "threads": args.threads,
               "hero": hero, "gepa": gepa, "overhead_ratio_hero_over_gepa": ratio}
    print(f"budget {args.budget} metric calls, train {args.train}, val {args.val}, threads {args.threads}")
    for name, f in (("GEPA", gepa), ("HERO-O", hero)):
        print(f"{name:7s} wall {f['wall_s']:.2f}s  metric calls {f['metric_calls']}  task-LM calls {f['task_lm_calls']}"
              f"  reflection calls {f['reflection_lm_calls']}  per rollout {f['per_rollout_ms']:.2f} ms")
    print(f"overhead ratio (HERO-O / GEPA, per rollout): {ratio:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
