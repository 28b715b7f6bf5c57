"""What the placement of the instructions does to a seed program: pass@1 per placement.

The task programs put their instructions after the inputs (`dspy_hero.lm.adapter.InstructionPlacement`),
which a 1.5B model needs to follow a learned rule (`benchmarks/rule_placement.py`). It changes every
prompt, the seed's too, so this checks the seed itself on a task's evaluation examples: pass@1 per
placement, and against the first placement given how many answers change and fixes:breaks.
Deterministic local server, one request at a time.

    python benchmarks/restate_check.py --task spider --limit 40 --out benchmarks/results/restate-check-spider.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import dspy

from dspy_hero.lm.adapter import InstructionPlacement, ProgramAdapter
from dspy_hero.lm.local import local_lm
from dspy_hero.metrics.base import score_of
from dspy_hero.tasks.evaluate import SharedPrefixOrder
from dspy_hero.tasks.registry import load_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="spider")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--placements", nargs="+", default=[p.value for p in InstructionPlacement],
                        choices=[p.value for p in InstructionPlacement])
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = load_task(args.task)
    examples = list(task.test[: args.limit])
    program = task.make_program()
    order = SharedPrefixOrder()(program, examples)
    lm = local_lm(size=args.size, deterministic=True)
    runs: dict[str, list[dict]] = {}
    with dspy.context(lm=lm):
        for placement in map(InstructionPlacement, args.placements):
            rows = []
            with dspy.context(adapter=ProgramAdapter(placement=placement)):
                for i in order:
                    pred = program(**examples[i].inputs())
                    field = getattr(task.metric, "prediction_field", None) or program.output_field
                    rows.append({"index": i, "correct": score_of(task.metric(examples[i], pred)) >= 1.0,
                                 "program": str(getattr(pred, field, ""))})
            runs[placement.value] = sorted(rows, key=lambda r: r["index"])
    base_name, base = next(iter(runs.items()))
    summary = {"task": args.task, "n": len(base), "baseline": base_name,
               "correct": {name: sum(r["correct"] for r in rows) for name, rows in runs.items()},
               "vs_baseline": {name: {"fixes": sum(y["correct"] and not x["correct"] for x, y in zip(base, rows)),
                                      "breaks": sum(x["correct"] and not y["correct"] for x, y in zip(base, rows)),
                                      "programs_changed": sum(x["program"] != y["program"] for x, y in zip(base, rows))}
                               for name, rows in runs.items() if name != base_name}}
    print(json.dumps(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
