"""Does a small budget adopt more right rules when a round tests fewer, better-funded candidates?

HERO-O tests each candidate at a share of alpha / T, split over the K' candidates a round tests
(alpha / (T * K') with `EvenShares`; by default half goes to the first candidate). Splitting a small
budget over four candidates gives each ~12-20 pairs at alpha / 20, where even a rule that fixes a
fifth of the questions and breaks none cannot pass. By default a round tests only as many candidates
as get the pairs to detect a rule fixing `detectable_fix_share` (0.25) of them; 0 restores the old
funding (two first looks per candidate). This runs the real optimizer (auto="light" settings, T=5,
K=4) at several budgets in scripted rule-effect worlds (dspy_hero/bench/simulate_worlds.py):

- null: every proposed rule is noise (fixes 10%, breaks 10%): an adoption is a false adoption;
- helpful: the reflector also offers a +20-point rule (fixes 20%, breaks none) and a harmful one
  (fixes 10%, breaks 20%), first in alternating order, noise after them.

Per budget and funding: seeds whose final prompt holds the helpful rule / any noise rule / the
harmful rule, candidates tested and pairs per test, proposal (reflection) calls and metric calls.
A simulation of the mechanics, not of a model. Prints the table, writes
benchmarks/results/small-budget-funding.json.

    python benchmarks/small_budget_funding.py [--seeds 12] [--budgets 80 120 240]
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.acceptance import HARMFUL, HELPFUL, run_loop
from dspy_hero.bench.simulate_worlds import RuleEffectWorld

FUNDING = {"detect 25%": 0.25, "two first looks": 0.0}


def summarize(runs: list[dict]) -> dict:
    pairs = [n for r in runs for n in r["pairs"]]
    return {
        "seeds": len(runs),
        "helpful_kept": sum(r["helpful_in_final"] for r in runs),
        "noise_kept": sum(r["noise_in_final"] > 0 for r in runs),
        "harmful_kept": sum(r["harmful_in_final"] for r in runs),
        "tested_per_run": sum(r["candidates_tested"] for r in runs) / len(runs),
        "pairs_per_test": sum(pairs) / len(pairs) if pairs else 0.0,
        "reflection_calls_per_run": sum(r["reflection_calls"] for r in runs) / len(runs),
        "metric_calls_per_run": sum(r["metric_calls"] for r in runs) / len(runs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--budgets", type=int, nargs="+", default=[80, 120, 240])
    ap.add_argument("--examples", type=int, default=120)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "small-budget-funding.json"))
    args = ap.parse_args()
    logging.getLogger("dspy_hero").setLevel(logging.ERROR)
    runs: dict[str, list[dict]] = {}
    for budget in args.budgets:
        for world_name, known in (("null", ()), ("helpful", (HELPFUL, HARMFUL))):
            for funding, share in FUNDING.items():
                key = f"{budget}/{world_name}/{funding}"
                runs[key] = [run_loop(RuleEffectWorld(salt=f"{world_name}{s}", known=known), s, old=False,
                                      examples=args.examples, max_metric_calls=budget, detectable_fix_share=share)
                             for s in range(args.seeds)]
    summary = {k: summarize(v) for k, v in runs.items()}
    print(f"HERO-O (T=5, K=4) on {args.examples} examples, {args.seeds} seeds per row (scripted rule-effect worlds)")
    print(f"{'budget/world/funding':<34} {'+20 kept':>8} {'noise kept':>10} {'harmful':>7} {'tested':>6} "
          f"{'pairs/test':>10} {'refl calls':>10} {'calls':>6}")
    for k, s in summary.items():
        helpful = f"{s['helpful_kept']}/{s['seeds']}" if "/helpful/" in k else "-"
        harmful = f"{s['harmful_kept']}/{s['seeds']}" if "/helpful/" in k else "-"
        print(f"{k:<34} {helpful:>8} {s['noise_kept']:>7}/{s['seeds']:<2} {harmful:>7} {s['tested_per_run']:>6.1f} "
              f"{s['pairs_per_test']:>10.1f} {s['reflection_calls_per_run']:>10.1f} {s['metric_calls_per_run']:>6.0f}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": "python benchmarks/small_budget_funding.py " + " ".join(sys.argv[1:]),
                                "summary": summary, "runs": runs}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
