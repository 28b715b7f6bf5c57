"""Every report of a run, from per-method results: the comparison's JSON, Markdown and plots
(`benchmarks/compare.py`) and the `hero` CLI's run directory (results.json, report.md, the same plots).

One module for both doors: the paired fixes:breaks, HERO-O's fix:break per round (read once, by
`methods.hero_fix_break`), the adopted-rules and rounds tables and the two plots exist once. Every
figure is recomputed from the per-example outcomes, so the tables, the intervals and the plots
always agree with the JSON a reader can re-analyse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspy_hero.bench.methods import MethodResult, hero_fix_break
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


# ------------------------------------------------------------------------------------------ plots

@dataclass(frozen=True)
class Bar:
    """One method's bar: pass@1 and, when known, its 95% interval."""

    label: str
    pass_at_1: float
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, result: MethodResult) -> Bar:
        ci = result.ci or {}
        return cls(result.label, result.pass_at_1, ci.get("low"), ci.get("high"))


_COLOURS = ("#9aa5b1", "#3b7dd8", "#1f9e6e", "#d8893b", "#8e5bd8", "#c44e52", "#55a868")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on servers and CI
    import matplotlib.pyplot as plt

    return plt


def plot_accuracy(bars: Sequence[Bar], path: Path) -> None:
    """pass@1 per method, with 95% bootstrap error bars where the interval is known."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(bars)), 3.6))
    xs = list(range(len(bars)))
    values = [100 * b.pass_at_1 for b in bars]
    errors = [[max(0.0, 100 * (b.pass_at_1 - b.low)) if b.low is not None else 0.0 for b in bars],
              [max(0.0, 100 * (b.high - b.pass_at_1)) if b.high is not None else 0.0 for b in bars]]
    drawn = ax.bar(xs, values, yerr=errors if any(map(any, errors)) else None, capsize=4,
                   color=[_COLOURS[i % len(_COLOURS)] for i in xs])
    for bar, value, above in zip(drawn, values, errors[1]):
        ax.text(bar.get_x() + bar.get_width() / 2, value + above + 1, f"{value:.1f}", ha="center", fontsize=8)
    ax.set_xticks(xs, [b.label.replace(" (3 interactions)", "") for b in bars], rotation=25, ha="right", fontsize=8)
    ax.set_ylabel("pass@1 (%)")
    ax.set_ylim(0, 105)
    ax.set_title("pass@1 per method, held-out (95% bootstrap CI)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fix_break(series: Mapping[str, Sequence[Mapping[str, Any]]], path: Path, xlabel: str = "round") -> None:
    """Cumulative fixes (solid) and breaks (dashed) per round of each series: `hero_fix_break` rows
    (HERO-O's adopted decisions; their last point is the table's fix:break) or GEPA's candidates."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    rounds = sorted({int(r["round"]) for rows in series.values() for r in rows})
    if rounds:
        ax.set_xticks(rounds)
    for i, (label, rows) in enumerate(series.items()):
        colour, xs = _COLOURS[(i + 1) % len(_COLOURS)], [int(r["round"]) for r in rows]
        ax.plot(xs, [r["fixes"] for r in rows], marker="o", color=colour, label=f"{label}: cumulative fixes")
        ax.plot(xs, [r["breaks"] for r in rows], marker="x", ls="--", color=colour, label=f"{label}: cumulative breaks")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("count")
    ax.set_title("cumulative fixes vs breaks per round")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ------------------------------------------------------------ the `hero` CLI's run directory report

@dataclass
class MethodRow:
    """One line of a run directory's summary table (and of the CLI's console table)."""

    method: str
    pass_at_1: float
    n: int
    rollouts: int | None = None
    lm_calls: int = 0
    tokens: int = 0
    wall_s: float = 0.0
    fix_break: str | None = None  # "fixes:breaks" of adopted HERO-O prompts, e.g. "6:1"
    extras: dict[str, Any] = field(default_factory=dict)
    vs_seed: str | None = None  # "fixes:breaks" against the seed prompt on the same evaluated examples
    ci_low: float | None = None  # pass@1's 95% bootstrap interval
    ci_high: float | None = None


ROW_COLUMNS = ("method", "pass@1", "n", "fixes:breaks vs seed", "rollouts", "in-sample fix:break", "LM calls",
               "tokens", "wall (s)")


def row_cells(row: MethodRow) -> list[str]:
    """A row's cells under ROW_COLUMNS, as report.md and the terminal show them."""
    return [row.method, f"{100 * row.pass_at_1:.1f}%", str(row.n), row.vs_seed or "—",
            "—" if row.rollouts is None else str(row.rollouts), row.fix_break or "—", str(row.lm_calls),
            str(row.tokens), f"{row.wall_s:.1f}"]


def vs_seed(seed: MethodResult, other: MethodResult) -> str | None:
    """"fixes:breaks" of `other` against the seed on the examples both evaluated (paired by example id,
    as the comparison pairs them), or None when they share no example."""
    mine, base = paired_passes(seed, other)
    if not mine:
        return None
    fixes, breaks = fixes_and_breaks(base, mine)
    return f"{fixes}:{breaks}"


def method_rows(results: Sequence[MethodResult], hero: dict[str, Any]) -> list[MethodRow]:
    """One table row per evaluation; rows of HERO-O programs carry its rollouts and fix:break."""
    fix_break = f"{hero.get('adopted_fixes', 0)}:{hero.get('adopted_breaks', 0)}" if hero else None
    seed = next((r for r in results if r.method == "seed"), None)
    rows = []
    for r in results:
        is_hero = r.method.startswith("hero_o")
        rows.append(MethodRow(
            method=r.label, pass_at_1=r.pass_at_1, n=len(r.outcomes),
            rollouts=hero.get("total_metric_calls") if is_hero else None,
            lm_calls=usage_total(r.lm_evaluation, "calls"),
            tokens=usage_total(r.lm_evaluation, "input_tokens", "output_tokens"), wall_s=r.wall_s_evaluation,
            fix_break=fix_break if is_hero else None,
            vs_seed=vs_seed(seed, r) if seed is not None and r is not seed else None,
            ci_low=(r.ci or {}).get("low"), ci_high=(r.ci or {}).get("high")))
    return rows


def markdown_table(rows: list[MethodRow], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines.append("| " + " | ".join(ROW_COLUMNS) + " |")
    lines.append("|---|" + "---:|" * (len(ROW_COLUMNS) - 1))
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


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


def write_report(out_dir: Path, title: str, rows: list[MethodRow], results: dict[str, Any]) -> dict[str, Path]:
    """Write results.json and report.md, with accuracy.png when there are evaluations and
    fix_to_break.png (and the adopted-rules and rounds tables) when there is a HERO-O result
    (`results["hero_o"]`, a HeroResult dict); return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    hero = results.get("hero_o") or {}
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md"}
    write_json(paths["json"], {"title": title, "rows": [r.__dict__ for r in rows], **results})
    body = f"# {title}\n\n" + (markdown_table(rows) if rows else "No evaluations in this run directory.\n")
    if results.get("notes"):
        body += "\n" + "\n".join(f"- {n}" for n in results["notes"]) + "\n"
    if hero.get("rounds") is not None:
        body += "\n" + adopted_rules_table(hero) + "\n" + rounds_table(hero)
    paths["markdown"].write_text(body)
    if rows:
        paths["accuracy"] = out_dir / "accuracy.png"
        plot_accuracy([Bar(r.method, r.pass_at_1, r.ci_low, r.ci_high) for r in rows], paths["accuracy"])
    if hero:
        paths["fix_to_break"] = out_dir / "fix_to_break.png"
        plot_fix_break({"HERO-O": hero_fix_break(hero)}, paths["fix_to_break"])
    return paths


def write_run_report(out: Path, title: str, results: Sequence[MethodResult], hero: dict[str, Any],
                     notes: list[str]) -> dict[str, Any]:
    """results.json, report.md and the plots of a CLI run directory, from its evaluations and HERO-O result."""
    rows = method_rows(results, hero)
    notes = list(notes)
    for r in results:
        errors = [o["error"] for o in r.outcomes if o.get("error")]
        if errors:
            notes.append(f"{r.method}: {len(errors)} example(s) raised and scored 0; first: {errors[0][:200]}")
    if hero:
        notes.append(
            f"HERO-O: {hero.get('total_metric_calls')} rollouts, optimization wall {hero.get('wall_s', 0):.0f}s, "
            f"final prompt ~{hero.get('final_prompt_tokens')} tokens"
        )
    data = {"reports": {r.method: r.to_dict() for r in results}, "hero_o": hero, "notes": notes}
    paths = write_report(out, title, rows, data)
    return {"rows": rows, "paths": paths, "notes": notes}


def rerender_report(out: Path, saved: dict[str, Any]) -> tuple[list[MethodRow], dict[str, Path]]:
    """Write a run directory's report again from the results.json it holds (its stage files are gone)."""
    data = dict(saved)
    rows = [MethodRow(**r) for r in data.pop("rows")]
    title = data.pop("title", "HERO")
    return rows, write_report(out, title, rows, data)


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
