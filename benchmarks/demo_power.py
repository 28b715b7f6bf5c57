"""How often would a demo-sized paired test adopt a rule whose per-question effect was measured?

`rule_effect.py` measures a rule on a whole pool of questions: which ones it fixes and which it breaks
against the seed. HERO-O's paired test sees only a draw of that pool, as many pairs as its budget buys.
This replays the real acceptance test (`SignTestAcceptance` with the loop's looks, early spending and
futility stops) on random draws of the measured outcomes, without replacement, for several pair budgets:
the chance that a right rule is adopted at the demo's size, and how it grows with the budget. The measured
outcomes are deterministic (deterministic server), so the only randomness is which questions are drawn.

    python benchmarks/demo_power.py benchmarks/results/rule-wording-demo-qwen1.5b.json --pairs 19 27 32 40
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dspy_hero.optimizer.acceptance import SignTestAcceptance


def adoption_rate(pairs: dict[str, tuple[float, float]], budget_pairs: int, update_pool: int, reps: int, seed: int,
                  alpha: float, max_size: int) -> float:
    """Share of `reps` random update pools (`update_pool` questions drawn from the measured ones, in a
    random order; the test plans its looks over it) in which the test, stopped after `budget_pairs` pairs
    (the budget running out makes that look its last, as in the loop), adopts the candidate."""
    rng = random.Random(seed)
    ids = sorted(pairs)
    rule = SignTestAcceptance(alpha=alpha, max_size=max_size)
    adopted = 0
    for _ in range(reps):
        order = rng.sample(ids, min(len(ids), max(update_pool, budget_pairs)))
        test = rule.start("candidate", order)
        bought = 0
        while not test.done:
            want = test.want()
            affordable = want[: max(0, budget_pairs - bought)]
            bought += len(affordable)
            test.feed(want, {i: pairs[i] for i in affordable})
        adopted += test.decision.accepted
    return adopted / reps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outcomes", type=Path, help="a rule_effect.py JSON")
    parser.add_argument("--pairs", type=int, nargs="+", default=[19, 27, 32, 40])
    parser.add_argument("--reps", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.1, help="the run's false-adoption level (one test)")
    parser.add_argument("--update-pool", type=int, default=32, help="the loop's update pool (the demo's at 80 "
                        "rollouts: 32); a budget of more pairs draws a pool that large")
    parser.add_argument("--max-size", type=int, default=64, help="the test's largest look")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    data = json.loads(args.outcomes.read_text(encoding="utf-8"))
    seed_right = {i: o["right"] for i, o in data["outcomes"]["seed"].items()}
    rows = []
    for variant in data["variants"]:
        got = data["outcomes"][variant["label"]]
        pairs = {i: (float(seed_right[i]), float(got[i]["right"])) for i in seed_right}
        rates = {n: adoption_rate(pairs, n, args.update_pool, args.reps, args.seed, args.alpha, args.max_size) for n in args.pairs}
        rows.append({"label": variant["label"], "rule": variant["rule"], "fixes": variant["fixes"],
                     "breaks": variant["breaks"], "pool": len(pairs), "adoption_rate": rates})
        print(f"{variant['label']} ({variant['fixes']} fixes : {variant['breaks']} breaks of {len(pairs)}): {variant['rule']}")
        print("  " + "  ".join(f"{n} pairs: {rate:.2f}" for n, rate in rates.items()))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"source": str(args.outcomes), "alpha": args.alpha, "reps": args.reps,
                                        "seed": args.seed, "update_pool": args.update_pool, "max_size": args.max_size, "variants": rows}, indent=1))


if __name__ == "__main__":
    main()
