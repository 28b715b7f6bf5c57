"""What putting the per-example input last does to speed and accuracy: one fresh server per layout.

The task programs used to restate their instructions after the inputs (``system_and_restated``): every
rollout then computed the question, the restated instructions (and any learned rule) and DSPy's format
reminder anew; only the system message and the schema came from the server's prompt cache, and a
candidate's system message, which holds its instructions, made the schema a new prefix for each
candidate. ``system_and_before_last_input`` restates them before the question instead, so they join the
prefix shared by every question of a database; ``before_last_input`` (today's default) also leaves them
out of the system message, so every variant shares the schema's prefix as well. This runs the seed
program and the seed plus one rule (the demo's soft-deletion rule, as HERO-O renders it) on a task's
questions, grouped by database as the harness runs them, once per placement, each on a fresh default
local server (the one `hero demo` uses), and prints correct counts, fixes:breaks against the first
placement, and the server's own counters: prompt tokens computed, generated tokens and their seconds.
Writes JSON.

    python benchmarks/input_layout.py --out benchmarks/results/input-layout-demo-qwen1.5b.json
    python benchmarks/input_layout.py --task spider --limit 40 --no-rule --placements system_and_restated \
        before_last_input --out benchmarks/results/input-layout-spider-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import dspy

from dspy_hero.bench.stats import fixes_and_breaks
from dspy_hero.files import write_json_atomic
from dspy_hero.lm.adapter import InstructionPlacement, ProgramAdapter
from dspy_hero.lm.local import ServerRegistry, local_lm, server_of
from dspy_hero.metrics.base import score_of
from dspy_hero.optimizer.instructions import build_variant, render_instructions
from dspy_hero.tasks.evaluate import SharedPrefixOrder
from dspy_hero.tasks.registry import load_task

# The rule `hero demo` adopted in sessions 10-21 (its reflector's wording).
DEMO_RULE = ("When a table has a column that flags members as deleted or archived (such as deleted_at or "
             "archived_at), those rows do not count: always add the condition `<that column> IS NULL` to the "
             "WHERE clause.")
COUNTERS = ("prompt_tokens_total", "prompt_seconds_total", "tokens_predicted_total", "tokens_predicted_seconds_total")


def run_one(program, examples, order, metric, placement) -> dict:
    rows, start = [], time.perf_counter()
    with dspy.context(adapter=ProgramAdapter(placement=placement)):
        for i in order:
            t = time.perf_counter()
            pred = program(**examples[i].inputs())
            field = getattr(metric, "prediction_field", None) or program.output_field
            rows.append({"index": i, "correct": score_of(metric(examples[i], pred)) >= 1.0,
                         "program": str(getattr(pred, field, "")), "s": time.perf_counter() - t})
    return {"rows": sorted(rows, key=lambda r: r["index"]), "wall_s": time.perf_counter() - start}


def paired(before: list[dict], after: list[dict]) -> dict[str, int]:
    fixes, breaks = fixes_and_breaks([r["correct"] for r in before], [r["correct"] for r in after])
    return {"fixes": fixes, "breaks": breaks}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="builtin-conventions-demo")
    parser.add_argument("--limit", type=int, default=0, help="first N evaluation examples (0: optimization and "
                        "evaluation examples, all of them)")
    parser.add_argument("--no-rule", action="store_true", help="the seed program only")
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--placements", nargs="+", choices=[p.value for p in InstructionPlacement],
                        default=["system_and_restated", "system_and_before_last_input", "before_last_input"])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = load_task(args.task)
    examples = list(task.test[: args.limit]) if args.limit else list(task.train) + list(task.test)
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    programs = {"seed": seed}
    if not args.no_rule:
        programs["rule"] = build_variant(seed, {name: render_instructions(predictor.signature.instructions, [DEMO_RULE])})
    order = SharedPrefixOrder()(seed, examples)
    runs: dict[str, dict] = {}
    for placement in map(InstructionPlacement, args.placements):
        registry = ServerRegistry()  # a fresh server: no prefix cached by the previous placement
        try:
            lm = local_lm(size=args.size, registry=registry)
            server = server_of(lm, registry)
            before = server.metrics()
            with dspy.context(lm=lm):
                for label, program in programs.items():
                    run = run_one(program, examples, order, task.metric, placement)
                    runs[f"{placement.value}/{label}"] = run
                    print(f"{placement.value} {label}: {sum(r['correct'] for r in run['rows'])}/{len(examples)} "
                          f"correct, {run['wall_s']:.1f} s", flush=True)
            after = server.metrics()
            runs[f"{placement.value}/server"] = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
            print(placement.value, json.dumps(runs[f"{placement.value}/server"]), flush=True)
        finally:
            registry.close()
    base = args.placements[0]
    summary = {"task": args.task, "n": len(examples), "baseline": base, "rule": None if args.no_rule else DEMO_RULE,
               "correct": {k: sum(r["correct"] for r in v["rows"]) for k, v in runs.items() if "rows" in v},
               "wall_s": {k: round(v["wall_s"], 1) for k, v in runs.items() if "rows" in v},
               "server": {k: v for k, v in runs.items() if "rows" not in v},
               "vs_baseline": {}}
    for placement in args.placements[1:]:
        for label in programs:
            a, b = runs[f"{base}/{label}"]["rows"], runs[f"{placement}/{label}"]["rows"]
            summary["vs_baseline"][f"{placement}/{label}"] = {
                **paired(a, b), "programs_changed": sum(x["program"] != y["program"] for x, y in zip(a, b))}
    if "rule" in programs:  # what the rule does under each placement
        for placement in args.placements:
            summary["vs_baseline"][f"{placement}/rule_vs_seed"] = paired(runs[f"{placement}/seed"]["rows"],
                                                                         runs[f"{placement}/rule"]["rows"])
    print(json.dumps(summary))
    if args.out:
        write_json_atomic(args.out, {**summary, "runs": runs})


if __name__ == "__main__":
    main()
