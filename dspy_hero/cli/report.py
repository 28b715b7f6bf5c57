"""Write a run's report directory: results JSON, a Markdown table and PNG plots.

Kept apart from the CLI so notebooks and the benchmark harness can write the same report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dspy_hero.files import write_json_atomic


@dataclass
class MethodRow:
    """One line of the summary table."""

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


def markdown_table(rows: list[MethodRow], title: str = "") -> str:
    lines = [f"## {title}", ""] if title else []
    lines.append("| method | pass@1 | n | fixes:breaks vs seed | rollouts | in-sample fix:break | LM calls | tokens | "
                 "wall (s) |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ftb = r.fix_break or "—"
        rollouts = "—" if r.rollouts is None else str(r.rollouts)
        lines.append(
            f"| {r.method} | {100 * r.pass_at_1:.1f}% | {r.n} | {r.vs_seed or '—'} | {rollouts} | {ftb} | {r.lm_calls} | "
            f"{r.tokens} | {r.wall_s:.1f} |"
        )
    return "\n".join(lines) + "\n"


def plot_accuracy(rows: list[MethodRow], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [r.method for r in rows]
    values = [100 * r.pass_at_1 for r in rows]
    bars = ax.bar(names, values, color=["#9aa5b1", "#3b7dd8", "#1f9e6e", "#d8893b", "#8e5bd8"][: len(rows)])
    for bar, value in zip(bars, values):
        ax.text(bar.get_x() + bar.get_width() / 2, value + 1, f"{value:.1f}", ha="center", fontsize=9)
    ax.set_ylabel("pass@1 (%)")
    ax.set_ylim(0, 105)
    ax.set_title("Accuracy per method (held-out split)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_fix_to_break(per_round: list[tuple[int, int]], path: Path) -> None:
    """Cumulative fixes and breaks of adopted candidates per round (their ratio is the table's fix:break)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fixes = breaks = 0
    xs, cum_f, cum_b = [], [], []
    for i, (f, b) in enumerate(per_round, start=1):
        fixes += f
        breaks += b
        xs.append(i)
        cum_f.append(fixes)
        cum_b.append(breaks)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if xs:
        ax.plot(xs, cum_f, marker="o", label="cumulative fixes")
        ax.plot(xs, cum_b, marker="o", label="cumulative breaks")
        ax.set_xticks(xs)
    ax.set_xlabel("round")
    ax.set_ylabel("count")
    ax.set_title("HERO-O: fixes vs breaks of adopted prompts")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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


def write_report(out_dir: Path, title: str, rows: list[MethodRow], results: dict[str, Any],
                 per_round_fix_break: list[tuple[int, int]] | None = None) -> dict[str, Path]:
    """Write results.json and report.md, with accuracy.png when there are evaluations and
    fix_to_break.png (and a rounds table) when there is a HERO-O result; return the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / "results.json", "markdown": out_dir / "report.md"}
    write_json_atomic(paths["json"], {"title": title, "rows": [r.__dict__ for r in rows], **results})
    body = f"# {title}\n\n" + (markdown_table(rows) if rows else "No evaluations in this run directory.\n")
    if results.get("notes"):
        body += "\n" + "\n".join(f"- {n}" for n in results["notes"]) + "\n"
    if results.get("hero_o", {}).get("rounds") is not None:
        body += "\n" + adopted_rules_table(results["hero_o"]) + "\n" + rounds_table(results["hero_o"])
    paths["markdown"].write_text(body)
    if rows:
        paths["accuracy"] = out_dir / "accuracy.png"
        plot_accuracy(rows, paths["accuracy"])
    if per_round_fix_break is not None:
        paths["fix_to_break"] = out_dir / "fix_to_break.png"
        plot_fix_to_break(per_round_fix_break, paths["fix_to_break"])
    return paths
