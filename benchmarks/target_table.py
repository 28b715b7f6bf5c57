"""Issue 17's target (a) across committed comparison runs: per run, each method's paired Δ vs the seed.

Target (a) asks that on Spider and BigCodeBench, over the split seeds, HERO-O is never significantly
below the seed (its paired interval's upper bound >= 0 in every run) and that its mean Δ is >= GEPA's and
>= MIPROv2's. Each run was measured by `benchmarks/compare.py`, whose results JSON holds every method's
paired bootstrap vs the seed (`summary.vs_seed`); this script only collects those figures, so a table
in RESULTS.md can be re-derived from the committed files. Result files that share a run (same task,
split, budget, evaluation questions and LMs; e.g. a GEPA row added later beside the HERO-O row) are
merged, after checking that their seed rows agree question by question. A run with another task or
reflection LM on the same questions (the teacher-student setting) is a run of its own. Means are over
the runs where both methods ran, so a method is never compared on runs the other did not take part in.

    python benchmarks/target_table.py [RESULTS_JSON ...] [--json benchmarks/results/targets-a.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
# The deterministic-server runs of the current acceptance test (session 1's spider-qwen1.5b.json predates both).
DEFAULT_RUNS = ("spider-det-qwen1.5b.json", "spider-hero-o-t-qwen1.5b.json", "spider-split1-qwen1.5b.json",
                "spider-split2-hero-o-qwen1.5b.json", "spider-split3-qwen1.5b.json",
                "spider-split3-gepa-qwen1.5b.json", "spider-split3-hero-o-t-qwen1.5b.json",
                "spider-split3-mipro-qwen1.5b.json", "spider-split3-ts-qwen0.5b-1.5b.json",
                "bcb-stdlib-qwen1.5b.json", "bcb-stdlib-200-qwen1.5b.json", "spider-split1-300-qwen1.5b.json",
                "spider-split2-300-qwen1.5b.json", "spider-split1-300-s26-qwen1.5b.json",
                "spider-split2-300-s26-qwen1.5b.json", "spider-split3-300-s27-qwen1.5b.json",
                "spider-split3-ts-s29-qwen0.5b-1.5b.json")
COMPARED = ("hero_o", "gepa", "mipro", "hero_o_t", "react")


def run_key(meta: dict[str, Any]) -> tuple:
    # the LMs' full names, as compare.py's resume check reads them; `lm_label` only shortens them for display
    lms = meta.get("task_lm"), meta.get("reflection_lm") or meta.get("task_lm")
    # the code that ran it (recorded since session 26): a re-run with later code is a run of its own
    return (meta["task"], meta.get("split_seed"), meta["budget"], tuple(meta["test_ids"]), lms, meta.get("code"))


def lm_label(meta: dict[str, Any]) -> str:
    """'1.5b' when one model is task and reflection LM, 'task 0.5b / reflection 1.5b' otherwise."""
    def short(name: str | None) -> str:
        name = (name or "?").rsplit("/", 1)[-1]
        return name.split("qwen2.5-coder-", 1)[-1].split("-instruct", 1)[0]
    task, reflection = short(meta.get("task_lm")), short(meta.get("reflection_lm") or meta.get("task_lm"))
    return task if task == reflection else f"task {task} / reflection {reflection}"


def merge_runs(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per run: its meta and, per method, the Δ vs seed and the outcomes' scores by question."""
    runs: dict[tuple, dict[str, Any]] = {}
    for data in files:
        key = run_key(data["meta"])
        run = runs.setdefault(key, {"meta": data["meta"], "delta": {}, "seed": None, "sources": []})
        run["sources"].append(data["source"])
        seed = data["methods"].get("seed")
        if seed and seed["status"] == "done":
            scores = {o["example_id"]: o["score"] >= 1.0 for o in seed["outcomes"]}
            if run["seed"] is not None and run["seed"] != scores:
                raise ValueError(f"{data['source']}: its seed row differs from {run['sources'][0]}'s on the same run")
            run["seed"] = scores
        for method, delta in data.get("summary", {}).get("vs_seed", {}).items():
            if data["methods"].get(method, {}).get("status") == "done":
                run["delta"][method] = delta
    return list(runs.values())


def table(runs: list[dict[str, Any]]) -> dict[str, Any]:
    rows = []
    for run in runs:
        m = run["meta"]
        rows.append({"task": m["task"], "lms": lm_label(m), "split_seed": m.get("split_seed"),
                     "budget": m["budget"], "code": m.get("code"),
                     "questions": len(m["test_ids"]), "sources": run["sources"],
                     "delta": {k: run["delta"][k] for k in COMPARED if k in run["delta"]}})
    never_below = {k: all(r["delta"][k]["high"] >= 0 for r in rows if k in r["delta"])
                   for k in COMPARED if any(k in r["delta"] for r in rows)}
    pairs = {}
    for other in ("gepa", "mipro"):
        both = [r for r in rows if "hero_o" in r["delta"] and other in r["delta"]]
        if both:
            mine = sum(r["delta"]["hero_o"]["estimate"] for r in both) / len(both)
            theirs = sum(r["delta"][other]["estimate"] for r in both) / len(both)
            pairs[f"hero_o_vs_{other}"] = {"runs": len(both), "hero_o_mean": mine, f"{other}_mean": theirs,
                                           "hero_o_at_least": mine >= theirs}
    return {"rows": rows, "never_significantly_below_seed": never_below, "mean_delta_on_shared_runs": pairs}


def markdown(result: dict[str, Any]) -> str:
    def cell(d: dict[str, Any] | None) -> str:
        if d is None:
            return "–"
        return (f"{d['estimate'] * 100:+.1f} [{d['low'] * 100:+.1f}, {d['high'] * 100:+.1f}] "
                f"{d['fixes']}/{d['breaks']}")

    head = "| task | LMs | split seed | calls | questions | code | " + " | ".join(COMPARED) + " |"
    lines = [head, "|" + "---|" * (6 + len(COMPARED))]
    for r in result["rows"]:
        code = r.get("code") or "not recorded"
        lines.append(f"| {r['task']} | {r['lms']} | {r['split_seed']} | {r['budget']} | {r['questions']} | {code} | "
                     + " | ".join(cell(r["delta"].get(k)) for k in COMPARED) + " |")
    lines.append("")
    lines.append("Upper bound >= 0 in every run: " + ", ".join(
        f"{k} {'yes' if v else 'NO'}" for k, v in result["never_significantly_below_seed"].items()))
    for name, p in result["mean_delta_on_shared_runs"].items():
        other = name.rsplit("_", 1)[1]
        lines.append(f"Mean Δ vs seed on the {p['runs']} run(s) with both: hero_o {p['hero_o_mean'] * 100:+.2f}, "
                     f"{other} {p[f'{other}_mean'] * 100:+.2f} (HERO-O's >= {other}'s: "
                     f"{'yes' if p['hero_o_at_least'] else 'NO'})")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", help=f"compare.py results JSONs (default: {', '.join(DEFAULT_RUNS)} in {RESULTS})")
    p.add_argument("--json", default=None, help="write the table here as JSON")
    a = p.parse_args(argv)
    paths = [Path(f) for f in a.files] or [RESULTS / f for f in DEFAULT_RUNS]
    missing = [str(f) for f in paths if not f.is_file()]
    if missing:
        raise SystemExit(f"not found: {', '.join(missing)}")
    files = [{**json.loads(f.read_text(encoding="utf-8")), "source": f.name} for f in paths]
    result = table(merge_runs(files))
    sys.stdout.write(markdown(result))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
