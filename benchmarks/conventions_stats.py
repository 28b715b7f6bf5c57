"""How much do the conventions of `builtin-conventions` matter? Measured by executing SQL, no LM.

For every question, the convention-unaware ("naive") SQL — the gold with every convention ignored — is
run on the real SQLite executor and compared with the gold result (BIRD set semantics). The figure
that matters is the fraction of *evaluation* questions the naive SQL gets wrong: the headroom a rule
learned on the optimization databases can win on databases it has never seen. Also printed: per kind,
how many questions ignoring only that kind breaks; and the accuracy of a writer who honours the kinds
cumulatively (most frequent first), i.e. what learning one more kind of rule is worth.

    python benchmarks/conventions_stats.py [--seeds 0 1 2] [--json benchmarks/results/conventions_stats.json]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from pathlib import Path

from dspy_hero.execution.sqlite import SQLiteExecutor
from dspy_hero.metrics.compare import bird_equal
from dspy_hero.tasks.builtin import conventions_data as cd
from dspy_hero.tasks.builtin import conventions_tasks as ct


def _right(path: Path, sql: str, gold_rows) -> bool:
    result = SQLiteExecutor(path).run(sql)
    return result.ok and bird_equal(result.rows, gold_rows)


def measure(seed: int, directory: Path) -> dict:
    paths = cd.ensure_databases(seed, directory)
    out: dict = {"seed": seed, "splits": {}}
    for split in cd.Split:
        qs = [(q, paths[db.db_id]) for db in cd.databases(split) for q in ct.build_questions(db, paths[db.db_id], seed)]
        gold = {q.example_id: SQLiteExecutor(path).run(q.gold_sql).rows for q, path in qs}
        naive_wrong = sum(not _right(path, q.naive_sql, gold[q.example_id]) for q, path in qs)
        claimed = Counter(k.value for q, _ in qs for k in q.naive_by_kind)
        breaks = {kind.value: sum(not _right(path, q.sql_ignoring(frozenset({kind})), gold[q.example_id]) for q, path in qs)
                  for kind in cd.Kind}
        order = [k for k, _ in claimed.most_common()]
        cumulative, honoured = [], []
        for kind in order:
            honoured.append(cd.Kind(kind))
            ignored = frozenset(cd.Kind) - frozenset(honoured)
            right = sum(_right(path, q.sql_ignoring(ignored), gold[q.example_id]) for q, path in qs)
            cumulative.append({"honours": [k.value for k in honoured], "pass_at_1": round(right / len(qs), 4)})
        out["splits"][split.value] = {
            "databases": [db.db_id for db in cd.databases(split)],
            "questions": len(qs),
            "controls": sum(not q.naive_by_kind for q, _ in qs),
            "naive_wrong": naive_wrong,
            "naive_wrong_fraction": round(naive_wrong / len(qs), 4),
            "questions_claiming_kind": dict(claimed),
            "questions_broken_by_ignoring_kind_alone": breaks,
            "cumulative_honouring": cumulative,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "conventions_stats.json")
    args = parser.parse_args(argv)
    runs = []
    with tempfile.TemporaryDirectory(prefix="hero-conventions-") as tmp:
        for seed in args.seeds:
            run = measure(seed, Path(tmp) / f"seed-{seed}")
            runs.append(run)
            for split, s in run["splits"].items():
                print(f"seed {seed} {split:12s}: {s['questions']} questions over {len(s['databases'])} databases, "
                      f"{s['controls']} controls; naive SQL wrong on {s['naive_wrong']} "
                      f"({100 * s['naive_wrong_fraction']:.1f}%)")
                print("    ignoring one kind alone breaks: " + ", ".join(
                    f"{k} {n}" for k, n in s["questions_broken_by_ignoring_kind_alone"].items()))
                print("    pass@1 honouring kinds cumulatively: " + ", ".join(
                    f"+{c['honours'][-1]} {100 * c['pass_at_1']:.1f}%" for c in s["cumulative_honouring"]))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/conventions_stats.py --seeds " + " ".join(map(str, args.seeds))
    args.json.write_text(json.dumps({"task": ct.TASK_NAME, "command": command, "runs": runs}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
