"""The two plots of every report, the comparison's and the `hero` CLI's run directory: pass@1 per
method with its 95% interval, and cumulative fixes and breaks per round. One implementation, so a
figure in a benchmark write-up and one from `hero demo` read the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dspy_hero.bench.methods import MethodResult


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
