"""Turn per-method results into the comparison's JSON, Markdown table and PNG plots.

Every figure is recomputed from the per-example outcomes, so the table, the intervals and the plots
always agree with the JSON a reader can re-analyse.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dspy_hero.bench.methods import MethodResult
from dspy_hero.bench.stats import fixes_and_breaks, paired_bootstrap
from dspy_hero.files import write_json_atomic as write_json  # noqa: F401 - re-exported for compare.py


def paired_vs(results: dict[str, MethodResult], baseline: str, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Per method: mean difference in pass@1 against `baseline` with a paired bootstrap CI, fixes, breaks."""
    base = results.get(baseline)
    if base is None or base.status != "done":
        return {}
    base_by_id = {o["example_id"]: float(o["score"] >= 1.0) for o in base.outcomes}
    out = {}
    for name, res in results.items():
        if name == baseline or res.status != "done":
            continue
        ids = [o["example_id"] for o in res.outcomes if o["example_id"] in base_by_id]
        mine = {o["example_id"]: float(o["score"] >= 1.0) for o in res.outcomes}
        a, b = [mine[i] for i in ids], [base_by_id[i] for i in ids]
        interval = paired_bootstrap(a, b, seed=seed)
        fixes, breaks = fixes_and_breaks(b, a)
        out[name] = {**interval.to_dict(), "fixes": fixes, "breaks": breaks}
    return out


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
        tokens = sum(v.get("input_tokens", 0) + v.get("output_tokens", 0) for v in opt.values()) if opt else 0
        refl = opt.get("reflection", {}) if opt else {}
        per_call = (f"{(refl.get('input_tokens', 0) + refl.get('output_tokens', 0)) / refl['calls']:.0f}"
                    if refl.get("calls") else "–")
        ev_calls = sum(v.get("calls", 0) for v in r.lm_evaluation.values())
        last = r.fix_break[-1] if r.fix_break else None
        fb = f"{last['fixes']}:{last['breaks']}" if last else "–"
        fbs = f"{vs_seed['fixes']}/{vs_seed['breaks']}" if vs_seed else "–"
        ves = "–" if r.ves is None else f"{r.ves:.1f}"
        rollouts = f"{r.rollouts_optimization}" + (f" / {r.budget}" if r.budget else "") if r.rollouts_optimization else "0"
        ci = r.ci or {}
        lines.append(
            f"| {r.label} | {_pct(r.pass_at_1)} [{_pct(ci.get('low'))}, {_pct(ci.get('high'))}] | {_diff(vs_seed)} | "
            f"{_diff(vs_gepa)} | {fbs} | {ves} | {rollouts} | {calls} | {tokens or '–'} | {per_call} | {ev_calls} | {fb} | "
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
        for row in x.get("lineage") or []:
            i, h = row["in_sample"], row["held_out"]
            lines.append(f"  - update {row['entry_id']} (round {row['round']}): in-sample {i['fixes']}:{i['breaks']} "
                         f"of {i['n']} pairs, held-out {h['fixes']}:{h['breaks']} of {h['n']}")
    for name in ("hero_o_t", "hero_o_react", "react"):
        r = results.get(name)
        if r is not None and r.status == "done":
            ref = r.extras.get("refinement") or {}
            per_q = ref.get("actions_per_query", r.extras.get("interactions_per_query"))
            lm_q = ref.get("lm_calls_per_query")
            lines.append(f"- {r.label}: actions (environment interactions for ReAct) per query {per_q}"
                         + (f", LM calls per query {lm_q}" if lm_q is not None else ""))
    for name in order:
        r = results.get(name)
        if r is not None and r.fix_break:
            per = ", ".join(f"r{x['round']}: {x['fixes']}:{x['breaks']}" for x in r.fix_break)
            lines.append(f"- {r.label} cumulative fix:break per round: {per}")
    return "\n".join(lines) + "\n"


def plots(out_dir: Path, results: dict[str, MethodResult], order: Sequence[str]) -> list[Path]:
    """accuracy.png (pass@1 with 95% CI error bars) and fix_break.png (cumulative ratio per round)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [results[m] for m in order if m in results and results[m].status == "done"]
    paths = []
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(done)), 3.6))
    xs = range(len(done))
    vals = [r.pass_at_1 * 100 for r in done]
    lo = [max(0.0, (r.pass_at_1 - r.ci.get("low", r.pass_at_1)) * 100) for r in done]
    hi = [max(0.0, (r.ci.get("high", r.pass_at_1) - r.pass_at_1) * 100) for r in done]
    ax.bar(xs, vals, yerr=[lo, hi], capsize=4, color="#4c72b0")
    ax.set_xticks(list(xs), [r.label.replace(" (3 interactions)", "") for r in done], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("pass@1 (%)")
    ax.set_title("pass@1 per method (95% bootstrap CI)")
    fig.tight_layout()
    paths.append(out_dir / "accuracy.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.4))
    for r in done:
        if r.fix_break:
            ratios = [(x["fixes"] / x["breaks"]) if x["breaks"] else float(x["fixes"]) for x in r.fix_break]
            ax.plot([x["round"] for x in r.fix_break], ratios, marker="o", label=r.label)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("round (GEPA: candidate)")
    ax.set_ylabel("cumulative fixes / breaks")
    ax.set_title("cumulative fix-to-break ratio (no breaks: fixes)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    paths.append(out_dir / "fix_break.png")
    fig.savefig(paths[-1], dpi=120)
    plt.close(fig)
    return paths


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
