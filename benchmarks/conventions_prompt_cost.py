"""What the example rows in the conventions prompt cost: seconds per rollout and prompt tokens, by rows shown.

The conventions task shows example rows of every table after the DDL (`schema_with_rows`). On a CPU a
rollout's cost is mostly the first pass over a new database's prompt, so the rows shown decide how
long an evaluation takes. This runs the seed program on the first held-out questions of the demo
split, grouped by database (as every evaluation runs), once per row count, interleaving nothing else,
and prints the median and first-pass seconds, the prompt tokens and the answers right.

    python benchmarks/conventions_prompt_cost.py --rows 3 1 --questions 10 \
        --out benchmarks/results/conventions-prompt-cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import dspy

from dspy_hero.lm.local import local_lm
from dspy_hero.metrics.base import score_of
from dspy_hero.tasks.builtin.conventions_tasks import conventions_demo_task


def measure(lm: dspy.LM, rows: int, questions: int) -> dict:
    task = conventions_demo_task(sample_rows=rows)
    program = task.make_program()
    examples = sorted(task.test[:questions], key=lambda ex: str(ex.db_id))  # grouped, as evaluations run
    calls, seen = [], set()
    with dspy.context(lm=lm):
        for ex in examples:
            start = time.perf_counter()
            pred = program(**ex.inputs())
            seconds = time.perf_counter() - start
            usage = lm.history[-1].get("usage") or {}
            calls.append({"db_id": ex.db_id, "first_of_database": ex.db_id not in seen, "seconds": seconds,
                          "prompt_tokens": int(usage.get("prompt_tokens", 0) or 0),
                          "correct": score_of(task.metric(ex, pred)) >= 1.0})
            seen.add(ex.db_id)
    first = [c["seconds"] for c in calls if c["first_of_database"]][1:]  # the very first call also loads the model
    return {"rows": rows, "n": len(calls), "median_s": statistics.median(c["seconds"] for c in calls),
            "first_pass_median_s": statistics.median(first) if first else None,
            "prompt_tokens_median": statistics.median(c["prompt_tokens"] for c in calls),
            "correct": sum(c["correct"] for c in calls), "calls": calls}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[3, 1])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lm = local_lm(size=args.size)
    lm("Say OK.")  # load the model before the first measured call
    results = [measure(lm, rows, args.questions) for rows in args.rows]
    for r in results:
        print(f"rows {r['rows']}: median {r['median_s']:.2f} s/rollout, first pass over a database "
              f"{r['first_pass_median_s']:.2f} s, prompt ~{r['prompt_tokens_median']:.0f} tokens, "
              f"{r['correct']}/{r['n']} correct")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"size": args.size, "questions": args.questions, "results": results}, indent=2))


if __name__ == "__main__":
    main()
