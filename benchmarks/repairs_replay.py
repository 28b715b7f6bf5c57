"""What HERO-T's programmatic repairs (`dspy_hero.refine.repairs.SqlRepairs`) do to recorded programs.

No LM is run. For every program a finished `compare.py` run recorded (per method), this assesses it
as HERO-T does (`refine.suspect.assess`); for each *failing* one (does not run, fails its check) it
asks the repairer for an edit, runs the edit, assesses it again, and scores it with the task metric.
It reports how many failing programs got a repair, how many repairs run, how many the gate's
result-shape rule would accept without a judge (failing -> runs and is not suspect), and how many
of those are right, by kind of edit. The labels are read only to score.

A failing program scores 0, so any accepted repair can only add: "right" is the upper bound of what
repairs add to that method's pass@1 before the reviser or judge are asked anything.

    python benchmarks/repairs_replay.py benchmarks/results/spider-split1-300-qwen1.5b.json \
        [--methods seed,hero_o] [--out benchmarks/results/repairs-replay-spider-split1.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import dspy

from dspy_hero.fields import ENVIRONMENT_FIELDS, get_field
from dspy_hero.refine.repairs import SqlRepairs
from dspy_hero.refine.suspect import assess
from dspy_hero.tasks.hub import shared_benchmarks_dir
from dspy_hero.tasks.registry import load_task

TASK_TEXT_FIELDS = ("question", "nl_question")


def kind_of(change: str) -> str:
    if "always holds" in change:
        return "IS NULL on absent column"
    if change.startswith("SQLite has no"):
        return "date part"
    return "requalified"


def open_task(meta: dict[str, Any], data: str | None):
    name = meta["task"]
    kwargs: dict[str, Any] = {"split_seed": meta.get("split_seed", 0)}
    if not name.startswith("builtin-"):
        kwargs["data_dir"] = data or str(shared_benchmarks_dir() / name)
    return load_task(name, **kwargs)


def replay(results: Path, methods: list[str] | None, data: str | None) -> dict[str, Any]:
    run = json.loads(results.read_text(encoding="utf-8"))
    task = open_task(run["meta"], data)
    if task.language != "sql":
        raise SystemExit(f"{task.name}: repairs are for SQL tasks; this task's language is {task.language}")
    repairer = SqlRepairs()
    try:
        by_id = {get_field(ex, "example_id"): ex for ex in [*task.train, *task.test]}
        out: dict[str, Any] = {}
        for method, record in run["methods"].items():
            if (methods and method not in methods) or not record.get("outcomes"):
                continue
            counts: Counter[str] = Counter()
            kinds: dict[str, Counter[str]] = {}
            cases = []
            for o in record["outcomes"]:
                ex = by_id.get(o["example_id"])
                if ex is None:
                    counts["not in the task's data"] += 1
                    continue
                counts["programs"] += 1
                env = task.environment_for(ex)
                inputs = {f: v for f in (*TASK_TEXT_FIELDS, *ENVIRONMENT_FIELDS) if (v := get_field(ex, f)) is not None}
                program = o.get("program") or ""
                if not assess("sql", program, env.execute(program), env, inputs).failing:
                    continue
                counts["failing"] += 1
                repair = repairer.repair(program, env, "sql")
                if repair is None:
                    continue
                counts["repaired"] += 1
                execution = env.execute(repair.program)
                after = assess("sql", repair.program, execution, env, inputs)
                accepted = execution.ok and not after.suspect
                score = task.metric(ex, dspy.Prediction(sql=repair.program))
                right = float(getattr(score, "score", score)) >= 1.0
                counts["runs"] += int(execution.ok)
                counts["accepted by checks"] += int(accepted)
                counts["accepted and right"] += int(accepted and right)
                counts["right (any verdict)"] += int(right)
                for k in {kind_of(c) for c in repair.changes}:
                    row = kinds.setdefault(k, Counter())
                    row["repaired"] += 1
                    row["accepted"] += int(accepted)
                    row["accepted and right"] += int(accepted and right)
                cases.append({"id": o["example_id"], "before": program, "after": repair.program,
                              "changes": list(repair.changes), "runs": execution.ok, "accepted": accepted,
                              "right": right})
            out[method] = {"counts": dict(counts), "by_kind": {k: dict(v) for k, v in kinds.items()}, "cases": cases}
        return {"results": str(results), "task": task.name, "split_seed": run["meta"].get("split_seed"),
                "methods": out}
    finally:
        task.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="compare.py results JSON file(s)")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: every method with programs)")
    p.add_argument("--data", default=None, help="benchmark directory (default: the shared one)")
    p.add_argument("--out", default=None, help="JSON path (default: benchmarks/results/repairs-replay.json)")
    a = p.parse_args(argv)
    methods = a.methods.split(",") if a.methods else None
    reports = []
    for path in a.results:
        report = replay(Path(path), methods, a.data)
        reports.append(report)
        print(f"{report['task']} (split seed {report['split_seed']}), {path}")
        for method, r in report["methods"].items():
            c = r["counts"]
            print(f"  {method:10s} programs {c.get('programs', 0)}, failing {c.get('failing', 0)}, repaired "
                  f"{c.get('repaired', 0)}, run {c.get('runs', 0)}, accepted by checks {c.get('accepted by checks', 0)}, "
                  f"of those right {c.get('accepted and right', 0)}  by kind: {r['by_kind']}")
    out = Path(a.out or Path(__file__).parent / "results" / "repairs-replay.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(reports, indent=1, default=str), encoding="utf-8")
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
