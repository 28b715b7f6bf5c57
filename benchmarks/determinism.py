"""Does the embedded model repeat itself whatever ran before? Evaluate the Spider seed program on the
same questions in two orders (as given, then shuffled so that databases interleave) and count the
questions whose generated query is identical, for each LM mode:

- ``default``: `local_lm()` (2 slots, the server's free prefix reuse; fastest, not repeatable);
- ``deterministic``: `local_lm(deterministic=True)` (one slot, pinned shared-prefix KV, a prefix seen
  before restored from its saved state; what the harness uses);
- ``deterministic-no-store``: the same with ``prefix_store_mib=0`` (every new pin computed afresh);
- ``from-scratch``: `local_lm(deterministic=True, reuse_prefix=False)` (the old deterministic mode).

    python benchmarks/determinism.py [--size 0.5b] [--databases 2] [--per-db 6] [--threads 2] [--modes ...]

The questions are the first `per_db` of each of the first `databases` databases of the Spider test
pool, interleaved (A1 B1 A2 B2 ...), so that the shuffled second order changes what ran before each.

Prints one line per mode (and how many queries equal the first mode's, per order) and writes
benchmarks/results/determinism.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

from dspy_hero.lm.local import close_local_servers, engine_of, local_lm
from dspy_hero.tasks.evaluate import evaluate_program, given_order
from dspy_hero.tasks.registry import load_task

RESULTS = Path(__file__).parent / "results" / "determinism.json"
MODES = {
    "default": {"deterministic": False},
    "deterministic": {"deterministic": True},
    "deterministic-no-store": {"deterministic": True, "prefix_store_mib": 0},
    "from-scratch": {"deterministic": True, "reuse_prefix": False},
}


def sample_questions(examples, databases: int, per_db: int) -> list:
    """The first `per_db` examples of each of the first `databases` db_ids, interleaved across databases."""
    groups: dict[str, list] = {}
    for ex in examples:
        members = groups.setdefault(ex.db_id, []) if (ex.db_id in groups or len(groups) < databases) else None
        if members is not None and len(members) < per_db:
            members.append(ex)
    columns = list(groups.values())
    return [col[i] for i in range(per_db) for col in columns if i < len(col)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--size", default="0.5b")
    p.add_argument("--databases", type=int, default=2)
    p.add_argument("--per-db", type=int, default=6)
    p.add_argument("--threads", type=int, default=2, help="DSPy threads")
    p.add_argument("--modes", default="default,deterministic")
    p.add_argument("--seed", type=int, default=0, help="shuffle seed of the second order")
    p.add_argument("--out", type=Path, default=RESULTS)
    a = p.parse_args()
    task = load_task("spider")
    first = sample_questions(task.test, a.databases, a.per_db)
    second = list(first)
    random.Random(a.seed).shuffle(second)
    rows, by_mode = [], {}
    for mode in a.modes.split(","):
        lm = local_lm(size=a.size, max_tokens=256, allow_download=False, **MODES[mode])
        programs, walls = [], []
        for examples in (first, second):
            start = time.perf_counter()
            report = evaluate_program(task.make_program(), examples, task.metric, lm=lm, num_threads=a.threads,
                                      order=given_order)
            walls.append(time.perf_counter() - start)
            programs.append({ex.example_id: o.program for ex, o in zip(examples, report.outcomes)})
        same = sum(programs[0][k] == programs[1][k] for k in programs[0])
        by_mode[mode] = programs
        base = next(iter(by_mode.values()))
        as_first = [sum(p[k] == b[k] for k in p) for p, b in zip(programs, base)]
        engine = engine_of(lm)
        row = {"mode": mode, "size": a.size, "questions": len(first), "dspy_threads": a.threads,
               "identical": same, "identical_fraction": same / max(1, len(first)),
               "same_as_first_mode": as_first,
               "wall_s": [round(w, 2) for w in walls], "load_avg": list(os.getloadavg()),
               "pin_stats": vars(engine.stats) if engine is not None else None}
        rows.append(row)
        print(f"{mode:22s} identical queries {same}/{len(first)}; as the first mode {as_first}; wall {walls[0]:.1f}s and {walls[1]:.1f}s; "
              f"load {row['load_avg'][0]:.2f}" + (f"; {row['pin_stats']}" if engine is not None else ""))
        close_local_servers()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps({"orders": ["given", f"shuffled(seed={a.seed})"], "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
