"""How many paired questions does one right rule fix? A rule's wordings on conventions questions.

HERO-O adopts a rule only when its paired test sees enough fixes and few enough breaks (about 4:0 at the
demo's level). What decides whether a demo-sized run can get there is the rule's fix rate per pair on
the questions the test draws, and for a 1.5B task model that depends on how the rule is worded. This
runs the seed program, and the seed plus each `--rule` (one variant each; default: the soft-deletion
rule the 1.5B reflector wrote in `hero demo`), on a pool of questions:

- ``--pool full`` (default): `--questions` optimization questions of the full conventions task,
  balanced over databases, optionally only the single-table ones (`--single-table`: no join,
  subquery, GROUP BY or rounding in the gold SQL, where a convention is most of what a model can miss);
- ``--pool demo``: the optimization questions of ``builtin-conventions-demo`` (its databases follow
  soft deletion alone; `conventions_tasks.conventions_demo_task`), the pool `hero demo`'s test draws from.

It prints each variant's correct count, fixes:breaks against the seed and the fixes on questions that
need a convention; writes JSON (every program, per variant).

    python benchmarks/rule_effect.py --single-table --questions 48 --out benchmarks/results/rule-effect-qwen1.5b.json
    python benchmarks/rule_effect.py --pool demo --rule "..." --rule "..." --out benchmarks/results/rule-wording-demo-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
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
    single_table,
    split_examples,
)

RULE = RULES["soft_delete"]  # the 1.5B reflector's own rule in `hero demo`


def questions(pool: str, n: int, only_single_table: bool) -> list[dspy.Example]:
    if pool == "demo":
        task = conventions_demo_task()
        task.close()
        return sorted(task.train, key=lambda ex: str(ex.db_id))  # grouped by database: shared prefixes
    train, _ = split_examples(conventions_examples(0, None, 1))
    if only_single_table:
        train = [ex for ex in train if single_table(ex.gold_sql)]
    return interleaved_by_database(seeded_order(train, 0, key=lambda ex: str(ex.example_id)))[:n]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", choices=["full", "demo"], default="full")
    parser.add_argument("--questions", type=int, default=48, help="--pool full: how many")
    parser.add_argument("--single-table", action="store_true", help="--pool full: single-table questions only")
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--rule", action="append", default=None, help="a rule wording (repeat for several)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rules = args.rule or [RULE]
    pool = questions(args.pool, args.questions, args.single_table)
    kinds = Counter("+".join(sorted(ex.conventions)) or "control" for ex in pool)
    print("questions per convention mix:", dict(kinds.most_common()), flush=True)
    task = conventions_demo_task()  # its program and metric (the same for every pool)
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    programs = {"seed": seed} | {f"rule {i}": build_variant(seed, {name: render_instructions(
        predictor.signature.instructions, [rule])}) for i, rule in enumerate(rules, 1)}
    outcomes: dict[str, dict[str, dict]] = {}
    start = time.time()
    with dspy.context(lm=local_lm(size=args.size, deterministic=True)):
        for label, program in programs.items():
            outcomes[label] = {}
            for ex in pool:
                pred = program(**ex.inputs())
                outcomes[label][str(ex.example_id)] = {"right": score_of(task.metric(ex, pred)) >= 1.0,
                                                      "sql": getattr(pred, "sql", None)}
            print(f"{label}: {sum(o['right'] for o in outcomes[label].values())}/{len(pool)} right "
                  f"({time.time() - start:.0f} s)", flush=True)
    seed_right = {i: o["right"] for i, o in outcomes["seed"].items()}
    needs = {str(ex.example_id): bool(ex.conventions) for ex in pool}
    variants = []
    for (label, got), rule in zip(list(outcomes.items())[1:], rules):
        fixes = [i for i, o in got.items() if o["right"] and not seed_right[i]]
        breaks = [i for i, o in got.items() if seed_right[i] and not o["right"]]
        variants.append({"label": label, "rule": rule, "right": sum(o["right"] for o in got.values()),
                         "fixes": len(fixes), "breaks": len(breaks), "fixes_needing_a_convention": sum(needs[i] for i in fixes)})
        print(f"{label}: {rule}\n  {variants[-1]['right']}/{len(pool)} right; {len(fixes)} fixes : {len(breaks)} breaks "
              f"vs the seed ({len(fixes) / max(1, len(pool)):.1%} of pairs fixed; {variants[-1]['fixes_needing_a_convention']} "
              f"of the fixes on the {sum(needs.values())} questions that need a convention)")
    summary = {"size": args.size, "pool": args.pool, "single_table": args.single_table, "n": len(pool),
               "seed_right": sum(seed_right.values()), "variants": variants, "wall_s": round(time.time() - start, 1),
               "outcomes": outcomes}
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(summary, indent=1))
    task.close()


if __name__ == "__main__":
    main()
