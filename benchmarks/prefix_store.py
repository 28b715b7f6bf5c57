"""What saved prefix states buy in HERO-O's paired test: current and candidate prompts in alternating chunks.

The deterministic server pins one shared prefix (system message + schema). HERO-O's acceptance test
runs the current prompt on a chunk of update examples, then the candidate on the same chunk; their
system messages differ, so without saved states every (prompt, database) switch computes the prefix
again. This runs that pattern on the conventions demo's training questions (the seed and the seed
plus one rule, chunks of `--chunk` over databases in the pool's order) once with
``prefix_store_mib=0`` and once with the store, and prints per mode: wall time, median seconds per
rollout, prefixes computed / restored, and the time the server spent on generation and on the
suffixes; and whether both modes gave the same programs (they must).

    python benchmarks/prefix_store.py --questions 24 --chunk 8 --out benchmarks/results/prefix-store-qwen1.5b.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import dspy

from dspy_hero.lm.local import close_local_servers, engine_of, local_lm
from dspy_hero.optimizer.instructions import build_variant, render_instructions
from dspy_hero.tasks.builtin.conventions_tasks import conventions_demo_task

RULE = ("When a table has a column that flags deleted or archived rows (such as deleted_at or archived_at), "
        "always leave those rows out.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=24)
    parser.add_argument("--chunk", type=int, default=8)
    parser.add_argument("--size", default="1.5b")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    task = conventions_demo_task()
    examples = list(task.train[: args.questions])
    seed = task.make_program()
    name, predictor = seed.named_predictors()[0]
    ruled = build_variant(seed, {name: render_instructions(predictor.signature.instructions, [RULE])})
    field = getattr(task.metric, "prediction_field", None) or seed.output_field
    rows, programs = [], {}
    for store_mib in (0, 2048):
        lm = local_lm(size=args.size, deterministic=True, prefix_store_mib=store_mib, allow_download=False)
        load_before = os.getloadavg()[0]
        walls, outs = [], {}
        start = time.perf_counter()
        with dspy.context(lm=lm):
            for lo in range(0, len(examples), args.chunk):
                chunk = sorted(range(lo, min(lo + args.chunk, len(examples))), key=lambda i: str(examples[i].db_id))
                for label, program in (("current", seed), ("candidate", ruled)):
                    for i in chunk:
                        t = time.perf_counter()
                        pred = program(**examples[i].inputs())
                        walls.append(time.perf_counter() - t)
                        outs[f"{label}:{i}"] = str(getattr(pred, field, ""))
        wall = time.perf_counter() - start
        stats = vars(engine_of(lm).stats).copy()
        programs[store_mib] = outs
        row = {"prefix_store_mib": store_mib, "rollouts": len(walls), "wall_s": round(wall, 1),
               "median_s": round(statistics.median(walls), 2), "load_before": round(load_before, 2),
               "pin_stats": stats}
        rows.append(row)
        print(f"store {store_mib:5d} MiB: {len(walls)} rollouts in {wall:.0f}s (median {row['median_s']}s); "
              f"prefixes computed {stats['prefix_builds']}, restored {stats['prefix_restores']}; "
              f"generation {stats['generation_s']:.0f}s for {stats['generated_tokens']} tokens, "
              f"suffixes {stats['prompt_s']:.0f}s; load {load_before:.2f}", flush=True)
        close_local_servers()
    same = sum(programs[0][k] == programs[2048][k] for k in programs[0])
    print(f"same programs in both modes: {same}/{len(programs[0])}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"questions": len(examples), "chunk": args.chunk, "size": args.size,
                                        "rows": rows, "same_programs": same, "of": len(programs[0])}, indent=2))


if __name__ == "__main__":
    main()
