"""Turn per-method results into the comparison's JSON, Markdown table and PNG plots, and hold the
pieces every report shares: paired fixes:breaks, usage totals and HERO-O's adopted-rules and rounds
tables (the `hero` CLI's run-directory report, `run_report`, is built from them; the plots are `plots`).

Every figure is recomputed from the per-example outcomes, so the table, the intervals and the plots
always agree with the JSON a reader can re-analyse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy_hero.bench.methods import MethodResult
from dspy_hero.bench.plots import Bar, plot_accuracy, plot_fix_break
from dspy_hero.bench.stats import fixes_and_breaks, paired_bootstrap
from dspy_hero.files import write_json_atomic as write_json


def paired_passes(base: MethodResult, other: MethodResult) -> tuple[list[float], list[float]]:
    """(other's, base's) pass/fail on the examples both evaluated, paired by example id."""
    base_by_id = {o["example_id"]: float(o["score"] >= 1.0) for o in base.outcomes}
    mine = {o["example_id"]: float(o["score"] >= 1.0) for o in other.outcomes}
    ids = [i for i in mine if i in base_by_id]
    return [mine[i] for i in ids], [base_by_id[i] for i in ids]


def paired_vs(results: dict[str, MethodResult], baseline: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per method: mean difference in pass@1 against `baseline` with a paired bootstrap CI, fixes, breaks."""
    base = results.get(baseline)
    if base is None or base.status != "done":
        return {}
    out = {}
    for name, res in results.items():
        if name == baseline or res.status != "done":
            continue
        a, b = paired_passes(base, res)
        interval = paired_bootstrap(a, b, seed=seed)
        fixes, breaks = fixes_and_breaks(b, a)
        out[name] = {**interval.to_dict(), "fixes": fixes, "breaks": breaks}
    return out


def usage_total(usage: Mapping[str, Mapping[str, int]], *keys: str) -> int:
    """The sum of `keys` (calls, input_tokens, output_tokens) over a phase's LMs (task, reflection)."""
    return sum(int(v.get(k, 0)) for v in usage.values() for k in keys)


def summary(results: dict[str, MethodResult], seed: int = 0) -> dict[str, Any]:
    return {"vs_seed": paired_vs(results, "seed", seed), "vs_gepa": paired_vs(results, "gepa", seed)}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x * 100:.1f}"


def _diff(d: dict[str, Any] | None) -> str:
    if not d:
        return "–"
    return f"{d['estimate'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}]"


def markdown(meta: dict[str, Any], results: dict[str, MethodResult], order: Sequence[str]) -> str:
    stats = summary(results, meta.get("seed", 0))
    lines = [
        f"# Comparison on {meta['task']}",
        "",
        f"- Split: {meta.get('split_note', '')}",
        f"- Sizes: optimization train {meta['sizes']['train']}, val {meta['sizes']['val']}; evaluation {meta['sizes']['test']}",
        (f"- Task LM: `{meta['task_lm']}`; reflection LM: `{meta['reflection_lm']}`; seed {meta['seed']}; "
        f"budget {meta['budget']} rollouts ({meta['budget_source']})"),
        f"- Command: `{meta.get('command', '')}`",
        f"- Machine: {meta.get('machine', '')}",
        "",
        ("| method | pass@1 (95% CI) | Δ vs seed [95% CI] | Δ vs GEPA [95% CI] | fixes/breaks vs seed | VES | "
        "opt. rollouts | opt. LM calls (task/refl.) | opt. tokens | tokens/refl. call | eval LM calls | "
        "cum. fix:break | wall s |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in order:
        r = results.get(name)
        if r is None:
            continue
        if r.status != "done":
            lines.append(f"| {r.label} | failed: {str(r.error)[:80]} |" + " |" * 11)
            continue
        vs_seed, vs_gepa = stats["vs_seed"].get(name), stats["vs_gepa"].get(name)
        opt = r.lm_optimization
        calls = f"{opt.get('task', {}).get('calls', 0)}/{opt.get('reflection', {}).get('calls', 0)}" if opt else "–"
        tokens = usage_total(opt, "input_tokens", "output_tokens")
        refl = opt.get("reflection", {}) if opt else {}
        per_call = (f"{(refl.get('input_tokens', 0) + refl.get('output_tokens', 0)) / refl['calls']:.0f}"
                    if refl.get("calls") else "–")
        ev_calls = usage_total(r.lm_evaluation, "calls")
        last = r.fix_break[-1] if r.fix_break else None
        cum = f"{last['fixes']}:{last['breaks']}" if last else "–"
        fbs = f"{vs_seed['fixes']}/{vs_seed['breaks']}" if vs_seed else "–"
        ves = "–" if r.ves is None else f"{r.ves:.1f}"
        rollouts = f"{r.rollouts_optimization}" + (f" / {r.budget}" if r.budget else "") if r.rollouts_optimization else "0"
        ci = r.ci or {}
        lines.append(
            f"| {r.label} | {_pct(r.pass_at_1)} [{_pct(ci.get('low'))}, {_pct(ci.get('high'))}] | {_diff(vs_seed)} | "
            f"{_diff(vs_gepa)} | {fbs} | {ves} | {rollouts} | {calls} | {tokens or '–'} | {per_call} | {ev_calls} | {cum} | "
            f"{r.wall_s_optimization + r.wall_s_evaluation:.1f} |"
        )
    lines += ["", ("Δ columns: paired bootstrap over evaluation examples (2,000 resamples), percentage points. "
              "Opt. rollouts: metric calls counted by the harness / budget given. "
              "Cumulative fix:break: HERO-O over adopted acceptance decisions (update pool); GEPA over each new "
              "candidate vs its parent on the validation set."), ""]
    resumed = [results[m].label for m in order if m in results and results[m].extras.get("resumed_from_checkpoint")]
    if resumed:
        lines.append(f"- Resumed from a checkpoint (counted rollouts cover only the resumed part): {', '.join(resumed)}")
    hero = results.get("hero_o")
    if hero is not None and hero.status == "done" and hero.extras:
        x = hero.extras
        lines.append(
            f"- HERO-O: adopted fixes/breaks {x.get('adopted_fixes')}/{x.get('adopted_breaks')}, all decisions "
            f"{x.get('overall_fixes')}/{x.get('overall_breaks')}; its own metric-call count {x.get('total_metric_calls')} "
            f"of {hero.budget}; final prompt ≈{x.get('final_prompt_tokens')} tokens; adopted per round: "
            f"{x.get('rounds_adopted')}"
        )
        # in-sample (the decisions) next to out-of-sample: the selection pool and the evaluation set
        test = stats["vs_seed"].get("hero_o")
        lines.append(
            f"- HERO-O fix:break of the final prompt vs the seed: in-sample {x.get('adopted_fixes')}:{x.get('adopted_breaks')}"
            f", held-out {x.get('held_out_pool') or 'selection'} pool {x.get('held_out_fixes')}:{x.get('held_out_breaks')}"
            f" (n={x.get('held_out_n')})" + (f", evaluation set {test['fixes']}:{test['breaks']}" if test else ""))
        for rule in adopted_rules({"lineage": x.get("lineage") or []}):
            lines.append(f"  - update {rule.entry_id} (round {rule.round}): in-sample {fb(rule.in_sample)} pairs, "
                         f"held-out {fb(rule.held_out)}")
    for name in ("hero_o_t", "hero_o_t_paper", "hero_o_react", "react"):
        r = results.get(name)
        if r is not None and r.status == "done":
            ref = r.extras.get("refinement") or {}
            per_q = ref.get("actions_per_query", r.extras.get("interactions_per_query"))
            lm_q = ref.get("lm_calls_per_query")
            lines.append(f"- {r.label}: actions (environment interactions for ReAct) per query {per_q}"
                         + (f", LM calls per query {lm_q}" if lm_q is not None else "")
                         + (f"; programmatic repairs {ref['repairs_accepted']} accepted of {ref['repairs']}"
                            if ref.get("repairs") else ""))
    for name in order:
        r = results.get(name)
        if r is not None and r.fix_break:
            per = ", ".join(f"r{x['round']}: {x['fixes']}:{x['breaks']}" for x in r.fix_break)
            lines.append(f"- {r.label} cumulative fix:break per round: {per}")
    return "\n".join(lines) + "\n"


def plots(out_dir: Path, results: dict[str, MethodResult], order: Sequence[str]) -> list[Path]:
    """The comparison's accuracy.png (pass@1 with 95% CI error bars) and fix_break.png (cumulative fixes
    and breaks per round of every method that records them: HERO-O's adopted decisions, GEPA's candidates)."""
    done = [results[m] for m in order if m in results and results[m].status == "done"]
    paths = [out_dir / "accuracy.png", out_dir / "fix_break.png"]
    plot_accuracy([Bar.of(r) for r in done], paths[0])
    plot_fix_break({r.label: r.fix_break for r in done if r.fix_break}, paths[1], xlabel="round (GEPA: candidate)")
    return paths


def write_comparison(out: Path, meta: dict[str, Any], results: dict[str, MethodResult],
                     order: Sequence[str]) -> dict[str, Any]:
    """results.json, results.md and the plots of a comparison; returns what results.json holds."""
    data = {"meta": meta, "methods": {m: results[m].to_dict() for m in order},
            "summary": summary(results, meta.get("seed", 0))}
    write_json(out / "results.json", data)
    (out / "results.md").write_text(markdown(meta, results, order), encoding="utf-8")
    plots(out, results, order)
    return data


# ---------------------------------------------------------------------- HERO-O's tables

@dataclass(frozen=True)
class AdoptedRule:
    """One update HERO-O adopted: the change, the acceptance decision's counts (in-sample: the pairs
    that decided it), and its held-out counts from `HeroResult.lineage` (re-scored on the selection
    pool, which decided nothing: vs. the prompt it replaced, and the chain so far vs. the seed)."""

    entry_id: str
    round: int
    change: str
    in_sample: tuple[int, int, int]  # fixes, breaks, pairs
    held_out: tuple[int, int, int]
    cumulative: tuple[int, int, int]
    final: bool = False


def _counts(d: dict[str, Any] | None) -> tuple[int, int, int]:
    d = d or {}
    return int(d.get("fixes", 0)), int(d.get("breaks", 0)), int(d.get("n", 0))


def adopted_rules(hero: dict[str, Any]) -> list[AdoptedRule]:
    """The adopted updates of a HeroResult dict, in the order they were adopted."""
    changes = {c.get("candidate_id"): (c.get("edit") if c.get("kind") == "edit" else
                                       "full text: " + " ".join(str(c.get("instructions", "")).split()))
               for r in hero.get("rounds", []) for c in r.get("candidates", [])}
    return [AdoptedRule(str(row.get("entry_id")), int(row.get("round", 0)), str(changes.get(row.get("entry_id"), "?")),
                        _counts(row.get("in_sample")), _counts(row.get("held_out")),
                        _counts(row.get("cumulative_held_out")), bool(row.get("final")))
            for row in hero.get("lineage", [])]


def fb(counts: tuple[int, int, int]) -> str:
    return f"{counts[0]}:{counts[1]} of {counts[2]}"


def adopted_rules_table(hero: dict[str, Any]) -> str:
    """Markdown: every adopted rule with its in-sample and held-out fixes:breaks."""
    pool = hero.get("held_out_pool") or "selection"
    lines = ["## HERO-O's adopted rules", ""]
    rules = adopted_rules(hero)
    if not rules:
        return "\n".join(lines + ["None: no candidate passed the paired acceptance test, so HERO-O returned the "
                                  "seed prompt (the rounds below say why each was refused)."]) + "\n"
    lines += [f"In-sample: the acceptance test's pairs (update pool). Held-out: re-scored on the {pool} pool, "
              "which decided nothing, against the prompt it replaced; cumulative: the prompt so far against the seed.",
              "", "| round | adopted change | in-sample fix:break | held-out fix:break | cumulative vs seed |",
              "|---:|---|---:|---:|---:|"]
    for r in rules:
        lines.append(f"| {r.round} | {r.change.replace('|', '/')} | {fb(r.in_sample)} | {fb(r.held_out)} | "
                     f"{fb(r.cumulative)}{' (final)' if r.final else ''} |")
    return "\n".join(lines) + "\n"


def rounds_table(hero: dict[str, Any]) -> str:
    """HERO-O's rounds from a HeroResult dict: what each diagnosed, tested, adopted and spent."""
    lines = ["## HERO-O rounds", "", "| round | predictor | failing / cases | candidates tested | adopted | "
             "fixes:breaks | metric calls |", "|---:|---|---:|---:|---|---:|---:|"]
    for r in hero.get("rounds", []):
        cases = r.get("diagnosis_cases", [])
        tested = [c["decision"] for c in r.get("candidates", []) if c.get("decision")]
        fixes, breaks = sum(d.get("fixes", 0) for d in tested), sum(d.get("breaks", 0) for d in tested)
        lines.append(f"| {r.get('round')} | {r.get('predictor')} | {sum(not c.get('passed') for c in cases)} / "
                     f"{len(cases)} | {len(tested)} | {r.get('adopted_candidate_id') or '—'} | {fixes}:{breaks} | "
                     f"{r.get('metric_calls', 0)} |")
    final = hero.get("final_instructions") or {}
    lines += ["", f"Final prompt: `{hero.get('final_entry_id', 'seed')}`, {hero.get('total_metric_calls', 0)}/"
                  f"{hero.get('budget', 0)} metric calls."]
    for name, text in final.items():
        lines += ["", f"Instructions of `{name}`:", "", "```text", text, "```"]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------- several runs (seeds)

def aggregate(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Mean and spread of pass@1 per method over several runs (e.g. seeds), plus pooled paired deltas.

    Pooling stacks every run's paired outcomes (each example once per run) before bootstrapping, so
    the interval reflects both example and run-to-run variation the way a multi-seed table reports it.
    """
    import statistics

    methods: dict[str, dict[str, Any]] = {}
    for run in runs:
        for name, res in run["methods"].items():
            if res["status"] == "done":
                methods.setdefault(name, {"label": res["label"], "pass_at_1": []})["pass_at_1"].append(res["pass_at_1"])
    out: dict[str, Any] = {"runs": len(runs), "seeds": [r["meta"]["seed"] for r in runs], "methods": {}}
    for name, m in methods.items():
        vals = m["pass_at_1"]
        out["methods"][name] = {"label": m["label"], "runs": len(vals), "mean": sum(vals) / len(vals),
                                "stdev": statistics.stdev(vals) if len(vals) > 1 else 0.0}
    for base in ("seed", "gepa"):
        deltas = {}
        for name in methods:
            if name == base:
                continue
            a: list[float] = []
            b: list[float] = []
            for run in runs:
                mine, ref = run["methods"].get(name), run["methods"].get(base)
                if not mine or not ref or mine["status"] != "done" or ref["status"] != "done":
                    continue
                ref_by_id = {o["example_id"]: float(o["score"] >= 1.0) for o in ref["outcomes"]}
                for o in mine["outcomes"]:
                    if o["example_id"] in ref_by_id:
                        a.append(float(o["score"] >= 1.0))
                        b.append(ref_by_id[o["example_id"]])
            if a:
                deltas[name] = paired_bootstrap(a, b).to_dict()
        out[f"vs_{base}"] = deltas
    return out


def aggregate_markdown(agg: dict[str, Any], order: Sequence[str]) -> str:
    lines = [f"# Aggregate over {agg['runs']} run(s) (seeds {agg['seeds']})", "",
             "| method | runs | mean pass@1 | stdev | Δ vs seed (pooled) [95% CI] | Δ vs GEPA (pooled) [95% CI] |",
             "|---|---|---|---|---|---|"]
    for name in order:
        m = agg["methods"].get(name)
        if m is None:
            continue
        lines.append(f"| {m['label']} | {m['runs']} | {m['mean'] * 100:.1f} | {m['stdev'] * 100:.1f} | "
                     f"{_diff(agg['vs_seed'].get(name))} | {_diff(agg['vs_gepa'].get(name))} |")
    return "\n".join(lines) + "\n"
