"""What restating the instructions after the inputs does to a seed program: pass@1 with and without it.

The task programs restate their instructions after the inputs (`ProgramAdapter(restate_instructions=True)`),
which a 1.5B model needs to follow a learned rule (`benchmarks/rule_placement.py`). It changes every
prompt, the seed's too, so this checks the seed itself on a task's evaluation examples: pass@1 either
way, how many answers change, fixes:breaks. Deterministic local server, one request at a time.

    python benchmarks/restate_check.py --task spider --limit 40 --out benchmarks/results/restate-check-spider.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import dspy

from dspy_hero.lm.adapter import ProgramAdapter
from dspy_hero.lm.local import local_lm
from dspy_hero.metrics.base import score_of
from dspy_hero.tasks.evaluate import SharedPrefixOrder
from dspy_hero.tasks.registry import load_task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="spider")
    parser.add_argument("--limit", type=int, default=40)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = load_task(args.task)
    examples = list(task.test[: args.limit])
    program = task.make_program()
    order = SharedPrefixOrder()(program, examples)
    lm = local_lm(size=args.size, deterministic=True)
    runs: dict[str, list[dict]] = {}
    with dspy.context(lm=lm):
        for restate in (False, True):
            rows = []
            with dspy.context(adapter=ProgramAdapter(restate_instructions=restate)):
                for i in order:
                    pred = program(**examples[i].inputs())
                    field = getattr(task.metric, "prediction_field", None) or program.output_field
                    rows.append({"index": i, "correct": score_of(task.metric(examples[i], pred)) >= 1.0,
                                 "program": str(getattr(pred, field, ""))})
            runs["restated" if restate else "system_only"] = sorted(rows, key=lambda r: r["index"])
    a, b = runs["system_only"], runs["restated"]
    summary = {"task": args.task, "n": len(a), "system_only_correct": sum(r["correct"] for r in a),
               "restated_correct": sum(r["correct"] for r in b),
               "fixes": sum(y["correct"] and not x["correct"] for x, y in zip(a, b)),
               "breaks": sum(x["correct"] and not y["correct"] for x, y in zip(a, b)),
               "programs_changed": sum(x["program"] != y["program"] for x, y in zip(a, b))}
    print(json.dumps(summary))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**summary, "runs": runs}, indent=2))


if __name__ == "__main__":
    main()
