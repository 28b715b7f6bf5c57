"""Does a small task model follow a rule in the system message, or only when it comes after the inputs?

For each convention kind given, the seed program and the seed plus one written rule run on the
training questions of the conventions task that hinge on that kind alone, once per instruction
placement (`dspy_hero.lm.adapter.InstructionPlacement`: the system message only, as DSPy's
ChatAdapter does; the system message and restated after the inputs; after the inputs only). Prints
seed / rule correct counts and fixes:breaks per placement; writes JSON.

    python benchmarks/rule_placement.py --questions 8 --out benchmarks/results/rule-placement-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import dspy

from dspy_hero.lm.adapter import InstructionPlacement, ProgramAdapter
from dspy_hero.lm.local import local_lm
from dspy_hero.metrics.base import score_of
from dspy_hero.optimizer.instructions import build_variant, render_instructions
from dspy_hero.tasks.builtin.conventions_tasks import conventions_demo_task

# Rules as a 1.5B reflector wrote them (soft deletion: the demo's own candidate) or as a person would.
RULES = {
    "soft_delete": "When a table has a column that flags deleted or archived rows (such as deleted_at or "
                   "archived_at), always leave those rows out.",
    "money": "Money columns (price, amount, total) store whole minor units such as cents, as the example rows "
             "show. Divide them by 100.0 when the question gives or asks for an amount of money.",
    "date_format": "Dates are stored as text in the format the example rows show, not as ISO dates. Filter on a "
                   "year or month with LIKE or substr on that format.",
}


def correct(program: dspy.Module, examples, metric, placement: InstructionPlacement) -> list[bool]:
    with dspy.context(adapter=ProgramAdapter(placement=placement)):
        return [score_of(metric(ex, program(**ex.inputs()))) >= 1.0 for ex in examples]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", default=["soft_delete", "money"], choices=sorted(RULES))
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--placements", nargs="+", default=[p.value for p in InstructionPlacement],
                        choices=[p.value for p in InstructionPlacement])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = conventions_demo_task()
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    lm = local_lm(size=args.size, deterministic=True)
    rows = []
    with dspy.context(lm=lm):
        for kind in args.kinds:
            examples = sorted((ex for ex in task.train if tuple(ex.conventions) == (kind,)),
                              key=lambda ex: str(ex.db_id))[: args.questions]
            ruled = build_variant(seed, {name: render_instructions(predictor.signature.instructions, [RULES[kind]])})
            for placement in map(InstructionPlacement, args.placements):
                before = correct(seed, examples, task.metric, placement)
                after = correct(ruled, examples, task.metric, placement)
                row = {"kind": kind, "rule": RULES[kind], "placement": placement.value, "n": len(examples),
                       "seed_correct": sum(before), "rule_correct": sum(after),
                       "fixes": sum(a and not b for a, b in zip(after, before)),
                       "breaks": sum(b and not a for a, b in zip(after, before))}
                rows.append(row)
                print(f"{kind:12s} {placement.value:20s} seed {row['seed_correct']}/{row['n']} "
                      f"with rule {row['rule_correct']}/{row['n']} (fixes {row['fixes']}, breaks {row['breaks']})",
                      flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"size": args.size, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
