"""The `hero` CLI's run-directory report: results.json, report.md and the two plots, from the
evaluations (`MethodResult`s, one per stage) and the HERO-O result that a run directory holds.

Built from the harness's pieces: the pairing of `report.paired_passes`, HERO-O's tables of
`report`, the fix:break reading of `methods.hero_fix_break` and the plots of `plots`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspy_hero.bench.methods import MethodResult, hero_fix_break
from dspy_hero.bench.plots import Bar, plot_accuracy, plot_fix_break
from dspy_hero.bench.report import adopted_rules_table, paired_passes, rounds_table, usage_total
from dspy_hero.bench.stats import fixes_and_breaks
from dspy_hero.files import write_json_atomic


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


def write_report(out_dir: Path, title: str, rows: list[MethodRow], results: dict[str, Any]) -> dict[str, Path]:
    """Write results.json and report.md, with accuracy.png when there are evaluations and
    fix_to_break.png (and the adopted-rules and rounds tables) when there is a HERO-O result
    (`results["hero_o"]`, a HeroResult dict); return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    hero = results.get("hero_o") or {}
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md"}
    write_json_atomic(paths["json"], {"title": title, "rows": [r.__dict__ for r in rows], **results})
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
