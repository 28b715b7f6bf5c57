"""Where a live HERO-O + HERO-T row's gain came from, read off its recorded refinement traces.

No LM and no database is run: `compare.py` records every HERO-T episode (steps, verdicts, accepted
revisions with the program before and after). For each results file this prints the paired Δ of
HERO-O + HERO-T vs HERO-O (bootstrap, as the harness computes it), fixes/breaks vs HERO-O, and splits
the accepted revisions by who proposed them: the programmatic repairer (no LM call) or the LM
reviser, and for the reviser's whether it revised a program that a repair had just made pass.
An example's outcome change is credited to the last accepted revision of its episode.

It also lists the accepted revisions that today's diagnosis marks as failing from their text alone (a
text function result compared with a number, `diagnosis.sql.text_number_comparisons`): today's gate
refuses those, so where such a revision was the episode's last step, the episode would have ended on
the program before it. With `--replay` (a `repairs_replay.py` JSON of the same run) it says whether
that program was right.

    python benchmarks/hero_t_live.py runs/conv-soft-s23-ranked/results.json [...] \
        [--out benchmarks/results/hero-t-live.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot.errors import SqlglotError

from dspy_hero.bench.stats import fixes_and_breaks, paired_bootstrap
from dspy_hero.diagnosis.sql import text_number_comparisons
from dspy_hero.refine.gate import same_program


def refused_now(program: str) -> bool:
    """Whether today's gate refuses this SQL from its text alone (it compares text with a number)."""
    try:
        tree = sqlglot.parse_one(program, read="sqlite")
    except SqlglotError:
        return False
    return tree is not None and bool(text_number_comparisons(tree))


def _scores(method: dict[str, Any]) -> dict[str, float]:
    return {o["example_id"]: float(o["score"]) for o in method["outcomes"]}


def summarize(results: dict[str, Any], base: str = "hero_o", refined: str = "hero_o_t",
              right_in_replay: dict[str, list[tuple[str, bool]]] | None = None) -> dict[str, Any]:
    """`right_in_replay`: example id -> [(repaired program, right)], from a `repairs_replay.py` JSON."""
    right_in_replay = right_in_replay or {}
    methods = results["methods"]
    before, after = _scores(methods[base]), _scores(methods[refined])
    ids = [i for i in before if i in after]
    a, b = [after[i] for i in ids], [before[i] for i in ids]
    fixes, breaks = fixes_and_breaks(b, a)
    by_source: Counter[str] = Counter()
    credited: Counter[str] = Counter()
    refused: list[dict[str, Any]] = []
    for outcome in methods[refined]["outcomes"]:
        trace = outcome.get("refinement") or {}
        steps = trace.get("steps") or []
        accepted = [s for s in steps if (s.get("verdict") or {}).get("accepted")]
        last_source = None
        repaired_before = False
        for s in accepted:
            source = "repair" if s.get("repaired") else ("reviser after a repair" if repaired_before else "reviser")
            repaired_before = repaired_before or bool(s.get("repaired"))
            by_source[source] += 1
            last_source = source
        i = outcome["example_id"]
        for rev in trace.get("accepted_revisions") or []:
            if not steps[rev["step"]].get("repaired") and refused_now(rev["after"]):
                refused.append({"id": i, "step": rev["step"], "last_step": rev["step"] == len(steps) - 1,
                                "refused": rev["after"], "before": rev["before"],
                                "before_right": next((right for program, right in right_in_replay.get(i, [])
                                                      if same_program(program, rev["before"])), None)})
        if last_source is not None and i in before:
            change = "fix" if before[i] < 1.0 <= after[i] else "break" if after[i] < 1.0 <= before[i] else "same"
            credited[f"{last_source}: {change}"] += 1
    delta = paired_bootstrap(a, b)
    return {"n": len(ids), "pass_base": sum(b) / len(b), "pass_refined": sum(a) / len(a),
            "delta_vs_base": delta.to_dict(), "fixes": fixes, "breaks": breaks,
            "accepted_by_source": dict(by_source), "outcome_by_last_source": dict(sorted(credited.items())),
            "accepted_then_refused_by_todays_gate": refused,
            "lm_calls_evaluation": methods[refined]["lm_evaluation"]["task"]["calls"],
            "wall_s_evaluation": methods[refined]["wall_s_evaluation"],
            "totals": {k: v for k, v in (methods[refined]["extras"].get("refinement") or {}).items()
                       if k in ("queries", "proposals", "accepted", "repairs", "repairs_accepted", "lm_calls")}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("results", nargs="+", help="results.json files holding hero_o and hero_o_t rows")
    p.add_argument("--out", default=None, help="write the summaries here as JSON")
    p.add_argument("--replay", default=None, help="a repairs_replay.py JSON covering the same runs' HERO-O programs")
    args = p.parse_args(argv)
    replayed = json.loads(Path(args.replay).read_text(encoding="utf-8")) if args.replay else []
    rows = []
    for path in args.results:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not {"hero_o", "hero_o_t"} <= set(data.get("methods", {})):
            print(f"{path}: no hero_o and hero_o_t rows, skipped", file=sys.stderr)
            continue
        right: dict[str, list[tuple[str, bool]]] = {}
        for run in replayed:  # the replay of the same split's HERO-O programs
            same = run["task"] == data["meta"]["task"] and run["split_seed"] == data["meta"].get("split_seed")
            for case in (run["methods"].get("hero_o", {}).get("cases", []) if same else []):
                right.setdefault(case["id"], []).append((case["after"], case["right"]))
        s = {"results": path, "task": data["meta"]["task"], "split_seed": data["meta"].get("split_seed"),
             **summarize(data, right_in_replay=right)}
        rows.append(s)
        d = s["delta_vs_base"]
        print(f"{path} ({s['task']}, split seed {s['split_seed']}): HERO-O {100 * s['pass_base']:.1f} -> "
              f"HERO-O + HERO-T {100 * s['pass_refined']:.1f}, Δ {100 * d['estimate']:+.1f} "
              f"[{100 * d['low']:+.1f}, {100 * d['high']:+.1f}], fixes/breaks {s['fixes']}/{s['breaks']}")
        print(f"  accepted revisions by source: {s['accepted_by_source']}")
        print(f"  outcome vs HERO-O by the episode's last accepted revision: {s['outcome_by_last_source']}")
        print(f"  totals: {s['totals']}; eval LM calls {s['lm_calls_evaluation']}, wall {s['wall_s_evaluation']:.0f} s")
        for r in s["accepted_then_refused_by_todays_gate"]:
            print(f"  refused by today's gate: {r['id']} step {r['step']} (last step: {r['last_step']}; the program "
                  f"before it right in the replay: {r['before_right']}): {r['refused']}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
