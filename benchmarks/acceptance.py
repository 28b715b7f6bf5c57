"""How often does HERO-O adopt a change that is not better? Acceptance alone, then the full loop.

1. One acceptance decision, simulated: paired outcomes with P(fix) = 0.1 + e/2 and P(break) =
   0.1 - e/2 for a true effect e of 0 (null: ~10% of answers flip each way), +5, +10 and +20 points,
   with at most n = 8, 16, 32 (and 64, the loop's light maximum) pairs from a pool of max(48, n): the adoption rate of the sound rule
   (`SignTestAcceptance`, alone, at alpha / K as in a round of K = 4 candidates, and at alpha / (T K)
   = alpha / 20, the level of one candidate in an auto="light" run) next to the old rule (an adjusted normal bound that decided on the point estimate when undecided).
2. The full HERO-O loop (`auto="light"`, 120 examples, scripted LMs, the real optimizer) in a null
   world (every proposed rule is noise) and a helpful-rule world (a +20-point rule, a rule that fixes
   10% and breaks 20%, and noise), 8 seeds each, with the sound rule (its default ranked level shares:
   half of a round's level to the first candidate), the sound rule with an even split (`sound_even`,
   plain Bonferroni) and the old rule.

Prints the tables and writes benchmarks/results/acceptance.json. A simulation of mechanics: see
dspy_hero/bench/simulate_worlds.py (RuleEffectWorld).

    python benchmarks/acceptance.py [--reps 2000] [--seeds 8]
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import random
import sys
from pathlib import Path
from statistics import NormalDist

import dspy

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dspy_hero.bench.simulate import effect_world_lms, effect_world_task
from dspy_hero.bench.simulate_worlds import RuleEffect, RuleEffectWorld
from dspy_hero.lm.scripted import engine_of
from dspy_hero.optimizer.acceptance import Decision, EvenShares, SignTestAcceptance
from dspy_hero.optimizer.hero import HeroOptimizer

EFFECTS = (0.0, 0.05, 0.10, 0.20)
SIZES = (8, 16, 32, 64)  # 64: the loop's auto='light' maximum (update pool of 60 at 120 examples)
HELPFUL = RuleEffect("When the question asks for a code, read it from the item number it names.", 0.20, 0.0)
HARMFUL = RuleEffect("When the question names an item, answer with the most common code instead.", 0.10, 0.20)


class OldRule:
    """The acceptance rule before issue 16, for comparison: a normal bound on an adjusted sample
    (one pseudo fix, one pseudo break), grown while it straddles the margin, and decided on the point
    estimate (mean > margin) when the pool, the maximum or the budget ran out."""

    def __init__(self, initial: int = 8, max_size: int = 32, alpha: float = 0.1, margin: float = 0.0):
        self.initial, self.max_size, self.alpha, self.margin = initial, max_size, alpha, margin

    def _bounds(self, ds: list[float]) -> tuple[float, float]:
        m = len(ds) + 2
        mean = sum(ds) / m
        var = max((sum(d * d for d in ds) + 2.0) / m - mean * mean, 0.0)
        half = NormalDist().inv_cdf(1.0 - self.alpha) * math.sqrt(var / m)
        return max(-1.0, mean - half), min(1.0, mean + half)

    def decide(self, candidate_id, order, pair_scores, *, family_size: int = 1) -> Decision:
        dec, ds = Decision(candidate_id, margin=self.margin), []
        limit, target = min(self.max_size, len(order)), min(self.initial, len(order))
        while True:
            want = order[len(dec.example_ids): target]
            got = pair_scores(want) if want else {}
            for i in want:
                if i in got:
                    d = got[i][1] - got[i][0]
                    ds.append(d)
                    dec.example_ids.append(i)
                    dec.fixes, dec.breaks, dec.ties = dec.fixes + (d > 0), dec.breaks + (d < 0), dec.ties + (d == 0)
            dec.n = len(ds)
            dec.stages.append(dec.n)
            if not ds:
                return dec
            dec.estimate = sum(ds) / dec.n
            dec.lower, dec.upper = self._bounds(ds)
            if dec.lower > self.margin or dec.upper <= self.margin:
                dec.accepted = dec.lower > self.margin
                return dec
            if len(got) < len(want) or dec.n >= limit:
                dec.accepted = dec.estimate > self.margin
                return dec
            target = min(self.max_size, target * 2)


def decision_rates(rule, effect: float, reps: int, seed: int, family: int = 1, pool: int = 48) -> float:
    rng = random.Random(seed)
    pf, pb = 0.1 + effect / 2, 0.1 - effect / 2
    order = [f"u{i}" for i in range(pool)]
    adopted = 0
    for _ in range(reps):
        out = {}
        for i in order:
            u = rng.random()
            out[i] = (0.0, 1.0) if u < pf else (1.0, 0.0) if u < pf + pb else (0.0, 0.0)
        adopted += rule.decide("c", order, lambda ids, out=out: {i: out[i] for i in ids}, family_size=family).accepted
    return adopted / reps


def part1(reps: int) -> list[dict]:
    rows = []
    for n in SIZES:
        for e in EFFECTS:
            seed = int(1000 * e) + n
            rows.append({
                "max_pairs": n, "effect_points": round(100 * e),
                "sound": decision_rates(SignTestAcceptance(max_size=n, alpha=0.1), e, reps, seed, pool=max(48, n)),
                "sound_alpha_over_4": decision_rates(SignTestAcceptance(max_size=n, alpha=0.1), e, reps, seed, family=4,
                                                     pool=max(48, n)),
                # the level of one candidate in the loop: alpha / T over rounds, / K within a round (light)
                "sound_alpha_over_20": decision_rates(SignTestAcceptance(max_size=n, alpha=0.1), e, reps, seed, family=20,
                                                      pool=max(48, n)),
                "old": decision_rates(OldRule(max_size=n), e, reps, seed, pool=max(48, n)),
            })
    return rows


def run_loop(world: RuleEffectWorld, seed: int, old: bool, examples: int = 120, **settings) -> dict:
    """One real HERO-O run in `world` (`settings`: HeroOptimizer's, auto="light" unless a budget is given)."""
    data, metric = effect_world_task(world, examples)
    task, reflect = effect_world_lms(world)
    student = dspy.Predict(dspy.Signature("question -> answer", "Answer the question with the item's code."))
    if old:
        settings["acceptance"] = OldRule(max_size=48)
    if "max_metric_calls" not in settings:
        settings.setdefault("auto", "light")
    with dspy.context(lm=task):
        out = HeroOptimizer(metric, reflection_lm=reflect, seed=seed, num_threads=1, display_progress=False,
                            **settings).compile(student, data)
    res = out.detailed_results
    final = res.final_instructions["self"] if "self" in res.final_instructions else next(iter(res.final_instructions.values()))
    rules = [line[2:] for line in final.splitlines() if line.startswith("- ")]
    tested = [c for r in res.rounds for c in r.candidates if c.decision is not None]
    return {
        "seed": seed,
        "final_rules": rules,
        "noise_in_final": sum(r not in (HELPFUL.rule, HARMFUL.rule) for r in rules),
        "helpful_in_final": HELPFUL.rule in rules,
        "harmful_in_final": HARMFUL.rule in rules,
        "harmful_tested": sum(c.edit == f"ADD: {HARMFUL.rule}" for c in tested),
        "candidates_tested": len(tested),
        "pairs": [c.decision.n for c in tested],
        "reflection_calls": len(engine_of(reflect).calls),
        "adoptions": sum(r.adopted_candidate_id is not None for r in res.rounds),
        "metric_calls": res.total_metric_calls, "budget": res.budget,
        "in_sample_fix_break": [res.adopted_fixes, res.adopted_breaks],
        "held_out_fix_break": [res.held_out_fixes, res.held_out_breaks, res.held_out_n],
    }


LOOP_RULES = ("sound", "sound_even", "old")


def part2(seeds: int, rules: tuple[str, ...] = LOOP_RULES) -> dict:
    out = {}
    for name, known in (("null", ()), ("helpful", (HELPFUL, HARMFUL))):
        for rule in rules:
            extra = {"level_shares": EvenShares()} if rule == "sound_even" else {}
            runs = [run_loop(RuleEffectWorld(salt=f"{name}{s}", known=known), s, old=rule == "old", **extra)
                    for s in range(seeds)]
            out[f"{name}/{rule}"] = runs
    return out


def summarize(runs: list[dict]) -> dict:
    n = len(runs)
    return {
        "seeds": n,
        "seeds_with_noise_in_final": sum(r["noise_in_final"] > 0 for r in runs),
        "seeds_with_helpful_in_final": sum(r["helpful_in_final"] for r in runs),
        "seeds_with_harmful_in_final": sum(r["harmful_in_final"] for r in runs),
        "mean_candidates_tested": sum(r["candidates_tested"] for r in runs) / n,
        "mean_metric_calls": sum(r["metric_calls"] for r in runs) / n,
        "budget": runs[0]["budget"],
        "within_budget": all(r["metric_calls"] <= r["budget"] for r in runs),
        "in_sample_fix_break": [sum(r["in_sample_fix_break"][i] for r in runs) for i in range(2)],
        "held_out_fix_break": [sum(r["held_out_fix_break"][i] for r in runs) for i in range(2)],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--loop-rules", default=",".join(LOOP_RULES),
                    help=f"part 2's acceptance variants, comma-separated from {LOOP_RULES}")
    ap.add_argument("--skip-decisions", action="store_true", help="run part 2 only")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "acceptance.json"))
    args = ap.parse_args()
    logging.getLogger("dspy_hero").setLevel(logging.ERROR)

    rules = tuple(r for r in args.loop_rules.split(",") if r)
    if unknown := set(rules) - set(LOOP_RULES):
        ap.error(f"--loop-rules: unknown {sorted(unknown)}; choose from {LOOP_RULES}")
    rows = [] if args.skip_decisions else part1(args.reps)
    if rows:
        print(f"1. One acceptance decision: adoption rate ({args.reps} simulations per cell; alpha = 0.1; pool max(48, n))")
        print(f"{'max n':>5} {'effect':>7} {'sound':>7} {'sound a/4':>9} {'a/20 loop':>9} {'old':>7}")
    for r in rows:
        print(f"{r['max_pairs']:>5} {'+' + str(r['effect_points']) if r['effect_points'] else 'null':>7} "
              f"{r['sound']:>7.3f} {r['sound_alpha_over_4']:>9.3f} {r['sound_alpha_over_20']:>9.3f} {r['old']:>7.3f}")

    loops = part2(args.seeds, rules)
    summary = {k: summarize(v) for k, v in loops.items()}
    print(f"\n2. Full HERO-O loop, auto='light', 120 examples, {args.seeds} seeds (scripted rule-effect worlds)")
    print(f"{'world/rule':<19} {'noise kept':>10} {'+20 kept':>8} {'harmful':>7} {'tested':>6} {'calls':>7} "
          f"{'in-sample f:b':>13} {'held-out f:b':>12}")
    for k, s in summary.items():
        helpful = f"{s['seeds_with_helpful_in_final']}/{s['seeds']}" if k.startswith("helpful") else "-"
        harmful = f"{s['seeds_with_harmful_in_final']}/{s['seeds']}" if k.startswith("helpful") else "-"
        print(f"{k:<19} {s['seeds_with_noise_in_final']:>7}/{s['seeds']:<2} {helpful:>8} {harmful:>7} "
              f"{s['mean_candidates_tested']:>6.1f} {s['mean_metric_calls']:>4.0f}/{s['budget']:<4} "
              f"{s['in_sample_fix_break'][0]:>6}:{s['in_sample_fix_break'][1]:<6} "
              f"{s['held_out_fix_break'][0]:>5}:{s['held_out_fix_break'][1]:<6}")
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"decision": rows, "loop_summary": summary, "loop_runs": loops}, indent=1))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
