"""How many paired questions does one right rule fix? The demo's soft-deletion rule on conventions questions.

HERO-O adopts a rule only when its paired test sees enough fixes and few enough breaks (about 4:0 at the
demo's level). What decides whether a demo-sized run can get there is the rule's fix rate per pair on
the questions the test draws. This runs the seed program and the seed plus one rule (the rule the 1.5B
reflector wrote in `hero demo`) on `--questions` optimization questions of the full conventions task,
balanced over databases, optionally only the single-table ones (`--single-table`: no join, subquery,
GROUP BY or rounding in the gold SQL, where a convention is most of what a model can miss), and prints
seed / rule correct counts and fixes:breaks; writes JSON.

    python benchmarks/rule_effect.py --single-table --questions 48 --out benchmarks/results/rule-effect-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections import Counter
from pathlib import Path

import dspy
from rule_placement import RULES

from dspy_hero.lm.local import local_lm
from dspy_hero.metrics.base import score_of
from dspy_hero.optimizer.instructions import build_variant, render_instructions
from dspy_hero.tasks.builtin.conventions_tasks import (
    conventions_demo_task,
    conventions_examples,
    interleaved_by_database,
    seeded_order,
    split_examples,
)

RULE = RULES["soft_delete"]  # the 1.5B reflector's own rule in `hero demo`
_NOT_SINGLE_TABLE = re.compile(r"\bJOIN\b|\bGROUP\s+BY\b|\bROUND\s*\(|\(\s*SELECT\b", re.IGNORECASE)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=48)
    parser.add_argument("--single-table", action="store_true")
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--rule", default=RULE)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    train, _ = split_examples(conventions_examples(0, None, 1))
    if args.single_table:
        train = [ex for ex in train if not _NOT_SINGLE_TABLE.search(ex.gold_sql)]
    questions = interleaved_by_database(seeded_order(train, 0, key=lambda ex: str(ex.example_id)))[: args.questions]
    kinds = Counter("+".join(sorted(ex.conventions)) or "control" for ex in questions)
    print("questions per convention mix:", dict(kinds.most_common()), flush=True)
    task = conventions_demo_task()  # its program and metric; the questions above are the full task's
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    ruled = build_variant(seed, {name: render_instructions(predictor.signature.instructions, [args.rule])})
    rows, start = [], time.time()
    with dspy.context(lm=local_lm(size=args.size, deterministic=True)):
        for ex in questions:
            before = score_of(task.metric(ex, seed(**ex.inputs()))) >= 1.0
            after = score_of(task.metric(ex, ruled(**ex.inputs()))) >= 1.0
            rows.append({"example_id": str(ex.example_id), "conventions": list(ex.conventions),
                         "seed": before, "rule": after})
            print(f"{ex.example_id:45s} {'+'.join(ex.conventions) or 'control':32s} seed {int(before)} rule {int(after)}",
                  flush=True)
    fixes = sum(r["rule"] and not r["seed"] for r in rows)
    breaks = sum(r["seed"] and not r["rule"] for r in rows)
    summary = {"size": args.size, "rule": args.rule, "single_table": args.single_table, "n": len(rows),
               "seed_correct": sum(r["seed"] for r in rows), "rule_correct": sum(r["rule"] for r in rows),
               "fixes": fixes, "breaks": breaks, "wall_s": round(time.time() - start, 1), "rows": rows}
    print(f"seed {summary['seed_correct']}/{len(rows)}, with the rule {summary['rule_correct']}/{len(rows)}: "
          f"{fixes} fixes, {breaks} breaks ({fixes / max(1, len(rows)):.1%} of pairs fixed)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
